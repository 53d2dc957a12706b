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

use jq_pg_test::{broken, claim, complete, sabotage, Client, TestDb};
use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::thread;

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
    let pruned: i32 = c.query_one("SELECT jq._prune(clock_timestamp() + interval '1 second')", &[]).unwrap().get(0);
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

/// A timer across restarts, compressed: `*/10 * * * *` over two hours, passes every 30 s, and six
/// restarts, each stopping the scheduler at hh:m9:50 and starting it at hh:(m+1)0:40, after
/// the due time, from a new connection that first calls jq.schedule again as an application
/// does on start. Every due time fires exactly once, none is skipped, the timer never resets.
///
/// Seen failing with JQ_TEST_BREAK=cron_upsert_resets_timer: each restart moved the timer back
/// to the real clock and the next pass counted dozens of skipped fire times.
#[test]
fn restarts_neither_reset_nor_lose_the_timer() {
    let (db, mut c) = setup("cron_restart");
    let schedule = "SELECT jq.schedule('ten', '*/10 * * * *', 'cq', '{\"r\": 1}')";
    c.batch_execute(schedule).unwrap();
    let h = hour_ahead(&mut c, 2);
    // Catch up from creation to just before H (one job, the rest counted), then a baseline.
    tick(&mut c, h - 1);
    let (fired0, skipped0, _) = counters(&mut c, "ten");
    let restarts_at: Vec<i64> = (0..6).map(|k| h + 20 * 60 * k + 9 * 60 + 50).collect();
    let mut s = db.connect();
    let mut t = h;
    let end = h + 2 * 3600;
    let mut next_restart = restarts_at.iter().peekable();
    while t < end + 60 {
        if let Some(&stop) = next_restart.next_if(|&&r| t >= r) {
            tick(&mut s, stop);
            // Down from hh:m9:50 to hh:(m+1)0:40; a new process, which re-declares its schedule.
            drop(s);
            s = db.connect();
            s.batch_execute(schedule).unwrap();
            t = stop + 50;
        }
        tick(&mut s, t);
        t += 30;
    }
    assert!(next_restart.next().is_none(), "every restart happened");
    let due: Vec<i64> = (0..=12).map(|k| h + 600 * k).collect();
    let fired: Vec<i64> = runs(&mut c, "ten")
        .into_iter()
        .filter(|r| r.0 >= h && r.1 == "enqueued" && r.2.is_some())
        .map(|r| r.0)
        .collect();
    assert_eq!(fired, due);
    let (fired1, skipped1, next) = counters(&mut c, "ten");
    assert_eq!(fired1 - fired0, 13);
    assert_eq!(skipped1, skipped0, "fire times skipped across restarts");
    assert_eq!(next, Some(end + 600));
}

/// Misfire policies after a 5-hour outage of a `*/10` schedule (30 missed fire times), and
/// fire_all past its catch-up bound. Every pass leaves next_run_at after the pass instant.
///
/// Seen failing with JQ_TEST_BREAK=cron_step_from_stored: next_run_at stayed in the past after
/// the outage, so the schedule was due again at once.
#[test]
fn misfire_policies_after_a_long_outage() {
    let (_db, mut c) = setup("cron_misfire");
    for (name, policy) in [("once", "fire_once"), ("skip", "skip"), ("all", "fire_all")] {
        c.execute("SELECT jq.schedule($1, '*/10 * * * *', 'cq', misfire => $2)", &[&name, &policy]).unwrap();
    }
    let h = hour_ahead(&mut c, 2);
    tick(&mut c, h);
    let base: HashMap<&str, (i64, i64, Option<i64>)> =
        ["once", "skip", "all"].iter().map(|&n| (n, counters(&mut c, n))).collect();
    for n in ["once", "skip", "all"] {
        assert_eq!(base[n].2, Some(h + 600));
    }
    let at = h + 5 * 3600 + 300; // 30 fire times missed, the latest 5 minutes ago
    let enq = tick(&mut c, at);
    assert_eq!(enq, 1 + 30);
    let d = |c: &mut Client, n: &str| {
        let (f, s, next) = counters(c, n);
        (f - base[n].0, s - base[n].1, next)
    };
    assert_eq!(d(&mut c, "once"), (1, 29, Some(h + 5 * 3600 + 600)));
    assert_eq!(d(&mut c, "skip"), (0, 30, Some(h + 5 * 3600 + 600)));
    assert_eq!(d(&mut c, "all"), (30, 0, Some(h + 5 * 3600 + 600)));
    assert!(runs(&mut c, "skip").contains(&(h + 5 * 3600, "skipped_misfire".into(), None)));
    let once_latest = runs(&mut c, "once").into_iter().filter(|r| r.0 > h).collect::<Vec<_>>();
    assert_eq!(once_latest.len(), 1);
    assert_eq!(once_latest[0].0, h + 5 * 3600);
    // The same instant again: nothing is due.
    assert_eq!(tick(&mut c, at), 0);
    // skip fires a due time that is at most jq.cron_misfire_grace() (60 s) late.
    assert_eq!(tick(&mut c, h + 5 * 3600 + 600 + 40), 3);
    assert_eq!(d(&mut c, "skip").0, 1);
    // fire_all enqueues at most jq.cron_max_catchup() (100), the latest; the rest are counted.
    let before = counters(&mut c, "all");
    let later = h + 5 * 3600 + 600 + 120 * 600; // 120 more fire times
    tick(&mut c, later);
    let after = counters(&mut c, "all");
    assert_eq!((after.0 - before.0, after.1 - before.1), (100, 20));
    let first_all: i64 = c
        .query_one(
            "SELECT extract(epoch FROM min(fire_time))::bigint FROM jq.cron_runs
             WHERE schedule = 'all' AND fire_time > to_timestamp($1::bigint)",
            &[&(h + 5 * 3600 + 600)],
        )
        .unwrap()
        .get(0);
    assert_eq!(first_all, later - 99 * 600);
}

/// overlap => skip_if_running: no new job while the previous one is ready or running; the
/// skipped fire times are logged and counted. An `allow` schedule fires every time.
///
/// Seen failing with JQ_TEST_BREAK=cron_no_overlap_check: a job per minute while the first
/// one was still unfinished.
#[test]
fn skip_if_running_waits_for_the_previous_job() {
    let (_db, mut c) = setup("cron_overlap");
    c.batch_execute(
        "SELECT jq.schedule('solo', '* * * * *', 'cq', overlap => 'skip_if_running');
         SELECT jq.schedule('many', '* * * * *', 'cq')",
    )
    .unwrap();
    let m = hour_ahead(&mut c, 1);
    assert_eq!(tick(&mut c, m), 2);
    assert_eq!(tick(&mut c, m + 60), 1, "solo's job is ready: only many fires");
    let solo_job: i64 = c.query_one("SELECT id FROM jq.jobs WHERE kind = 'solo'", &[]).unwrap().get(0);
    // Claim everything; solo's job is running now.
    let claimed = claim(&mut c, "cq", "w", 10, None);
    assert_eq!(tick(&mut c, m + 120), 1, "solo's job is running: only many fires");
    for j in &claimed {
        assert!(complete(&mut c, j));
    }
    assert_eq!(tick(&mut c, m + 180), 2, "solo's job completed: both fire");
    let r = runs(&mut c, "solo");
    let outcomes: Vec<(i64, &str)> = r.iter().filter(|x| x.0 >= m).map(|x| (x.0 - m, x.1.as_str())).collect();
    assert_eq!(outcomes, [(0, "enqueued"), (60, "skipped_overlap"), (120, "skipped_overlap"), (180, "enqueued")]);
    assert!(r.iter().any(|x| x.2 == Some(solo_job)));
    assert_eq!(jobs_of(&mut c, "solo"), 2);
    assert_eq!(jobs_of(&mut c, "many"), 4);
}

/// Rows broken behind jq's back (an expression or zone made invalid by a direct UPDATE, a queue
/// that no longer exists, a kind a job may not have) are flagged in last_error and in the fire
/// log, moved on, and never stop the healthy schedule or make jq.cron_tick raise.
///
/// Seen failing with JQ_TEST_BREAK=cron_no_subtransaction: jq.cron_tick raised 22023 and the
/// healthy schedule did not fire.
#[test]
fn broken_schedules_are_flagged_and_the_others_keep_firing() {
    let (_db, mut c) = setup("cron_poison");
    for name in ["a_bad_cron", "b_bad_zone", "c_no_queue", "d_bad_kind", "healthy"] {
        c.execute("SELECT jq.schedule($1, '* * * * *', 'cq')", &[&name]).unwrap();
    }
    // The one place these tests write jq.schedules directly: to make rows that jq's functions
    // refuse to create.
    c.batch_execute(
        "UPDATE jq.schedules SET cron = 'garbage' WHERE name = 'a_bad_cron';
         UPDATE jq.schedules SET timezone = 'Mars/Olympus' WHERE name = 'b_bad_zone';
         UPDATE jq.schedules SET queue = 'gone' WHERE name = 'c_no_queue';
         UPDATE jq.schedules SET kind = repeat('k', 300) WHERE name = 'd_bad_kind';",
    )
    .unwrap();
    let m = hour_ahead(&mut c, 1);
    for k in 0..3 {
        assert_eq!(tick(&mut c, m + 60 * k), 1, "pass {k}: only the healthy schedule fires");
    }
    assert_eq!(jobs_of(&mut c, "healthy"), 3);
    let rows = c
        .query(
            "SELECT name, last_error, extract(epoch FROM last_error_at)::bigint,
                    extract(epoch FROM next_run_at)::bigint, skipped_count
             FROM jq.schedules WHERE name <> 'healthy' ORDER BY name",
            &[],
        )
        .unwrap();
    for r in &rows {
        let name: String = r.get(0);
        let err: Option<String> = r.get(1);
        let err = err.unwrap_or_else(|| panic!("{name} not flagged"));
        let next: i64 = r.get(3);
        let skipped: i64 = r.get(4);
        match name.as_str() {
            // An invalid expression or zone is retried hourly, not on every pass.
            "a_bad_cron" => {
                assert!(err.starts_with("22023") && err.contains("garbage"), "{err}");
                assert_eq!(next, m + 3600);
                assert_eq!(skipped, 1);
            }
            "b_bad_zone" => {
                assert!(err.contains("Mars/Olympus"), "{err}");
                assert_eq!(next, m + 3600);
            }
            // Valid expression: the failed fire time is logged, the schedule moves on.
            "c_no_queue" => {
                assert!(err.starts_with("42704"), "{err}");
                assert_eq!(next, m + 180);
                assert_eq!(skipped, 3);
            }
            "d_bad_kind" => {
                assert!(err.starts_with("22023"), "{err}");
                assert_eq!(next, m + 180);
            }
            _ => unreachable!(),
        }
        let failed = runs(&mut c, &name).iter().filter(|x| x.1 == "failed").count();
        assert!(failed >= 1, "{name}: no failed fire-log row");
    }
    // Repaired (the queue exists again): it fires on its next pass, and last_error clears.
    c.batch_execute("SELECT jq.create_queue('gone')").unwrap();
    assert_eq!(tick(&mut c, m + 180), 2);
    let err: Option<String> =
        c.query_one("SELECT last_error FROM jq.schedules WHERE name = 'c_no_queue'", &[]).unwrap().get(0);
    assert_eq!(err, None);
}

/// Time zones with passes, in a session whose TimeZone is Asia/Tokyo (server UTC): a: 07:54 US/Central
/// fires at 13:54Z in January and 12:54Z in July; b, c, d across next year's DST changes in
/// America/New_York (spring forward on the second Sunday of March, fall back on the first
/// Sunday of November), passes every 10 minutes.
///
/// Seen failing with JQ_TEST_BREAK=cron_zone_ignored: fire times at 07:54Z / 02:30Z / 01:30Z.
#[test]
fn time_zones_and_daylight_saving_time_with_passes() {
    let (_db, mut c) = setup("cron_tz");
    c.batch_execute(
        "SET TimeZone = 'Asia/Tokyo';
         SELECT jq.schedule('a', '54 7 * * *', 'cq', timezone => 'US/Central');
         SELECT jq.schedule('b', '30 2 * * *', 'cq', timezone => 'America/New_York');
         SELECT jq.schedule('c', '30 * * * *', 'cq', timezone => 'America/New_York');
         SELECT jq.schedule('d', '30 1 * * *', 'cq', timezone => 'America/New_York');",
    )
    .unwrap();
    let y: i32 = c.query_one("SELECT extract(year FROM now())::int + 1", &[]).unwrap().get(0);
    let day = |c: &mut Client, sql: &str| -> i64 { epoch(c, &format!("({sql})::timestamp AT TIME ZONE 'UTC'")) };
    // a: a pass on January 15 and July 15 at 15:00Z fires that day's 07:54 Central.
    let jan = day(&mut c, &format!("make_date({y}, 1, 15)"));
    let jul = day(&mut c, &format!("make_date({y}, 7, 15)"));
    // (Checked after each pass: a pass prunes fire-log rows older than 7 days.)
    tick(&mut c, jan + 15 * 3600);
    let a: Vec<i64> = runs(&mut c, "a").into_iter().filter(|r| r.1 == "enqueued").map(|r| r.0).collect();
    assert_eq!(a, [jan + 13 * 3600 + 54 * 60], "January");

    let spring = day(
        &mut c,
        &format!("make_date({y}, 3, 8) + ((7 - extract(dow FROM make_date({y}, 3, 8))::int) % 7)"),
    );
    let fall = day(
        &mut c,
        &format!("make_date({y}, 11, 1) + ((7 - extract(dow FROM make_date({y}, 11, 1))::int) % 7)"),
    );
    let passes = |c: &mut Client, d0: i64| {
        let mut t = d0 + 3 * 3600; // 22:00 or 23:00 local the day before
        while t <= d0 + 9 * 3600 {
            tick(c, t);
            t += 600;
        }
    };
    let fired = |c: &mut Client, name: &str, d0: i64| -> Vec<i64> {
        runs(c, name)
            .into_iter()
            .filter(|r| r.1 == "enqueued" && r.0 > d0 + 3 * 3600 && r.0 <= d0 + 9 * 3600)
            .map(|r| (r.0 - d0) / 60)
            .collect()
    };
    // Minutes after 00:00Z of the day.
    passes(&mut c, spring);
    assert_eq!(fired(&mut c, "b", spring), [7 * 60], "b, spring forward: once, at 03:00 EDT");
    assert_eq!(
        fired(&mut c, "c", spring),
        [3 * 60 + 30, 4 * 60 + 30, 5 * 60 + 30, 6 * 60 + 30, 7 * 60 + 30, 8 * 60 + 30],
        "c, spring: 22:30 EST .. 01:30 EST, (no 02:30) 03:30 EDT, 04:30 EDT"
    );
    // Passes go forward in time: July after March, before November.
    tick(&mut c, jul + 15 * 3600);
    let a: Vec<i64> = runs(&mut c, "a").into_iter().filter(|r| r.1 == "enqueued").map(|r| r.0).collect();
    assert_eq!(a, [jul + 12 * 3600 + 54 * 60], "July");
    passes(&mut c, fall);
    assert_eq!(fired(&mut c, "b", fall), [7 * 60 + 30], "b, fall back: once, at 02:30 EST");
    assert_eq!(
        fired(&mut c, "c", fall),
        [3 * 60 + 30, 4 * 60 + 30, 5 * 60 + 30, 6 * 60 + 30, 7 * 60 + 30, 8 * 60 + 30],
        "c: 23:30 EDT, 00:30 EDT, 01:30 EDT, 01:30 EST, 02:30 EST, 03:30 EST"
    );
    assert_eq!(fired(&mut c, "d", fall), [5 * 60 + 30], "d: 01:30 EDT only");
    // Invalid zone: refused at creation.
    let e = c.execute("SELECT jq.schedule('e', '* * * * *', 'cq', timezone => 'Mars/Olympus')", &[]);
    assert_eq!(jq_pg_test::sqlstate(e), "22023");
}

/// A tiny deterministic generator (SplitMix64) for the differential test.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// One random field over [lo, hi]: `*`, a value, a range, a step, a stepped range or a list.
fn field(r: &mut Rng, lo: u64, hi: u64, allow_step: bool) -> String {
    let one = |r: &mut Rng| -> String {
        match r.below(if allow_step { 5 } else { 3 }) {
            0 | 1 => r.range(lo, hi).to_string(),
            2 => {
                let a = r.range(lo, hi - 1);
                let b = r.range(a + 1, hi);
                format!("{a}-{b}")
            }
            3 => format!("*/{}", r.range(1, (hi - lo).max(1))),
            _ => {
                let a = r.range(lo, hi - 1);
                let b = r.range(a + 1, hi);
                format!("{a}-{b}/{}", r.range(1, (hi - lo).max(1)))
            }
        }
    };
    match r.below(6) {
        0 | 1 => "*".into(),
        2 => format!("{},{}", one(r), one(r)),
        _ => one(r),
    }
}

/// Differential test: jq.cron_next against Python's croniter (pinned in .ci/setup) on 3000
/// random expressions and instants from 2000 to 2035, in UTC, Asia/Tokyo, Asia/Kolkata and
/// America/New_York. Cases whose answer is near a UTC-offset change of the zone are left out:
/// there the two DST policies differ by design (croniter: docs/cron.md).
///
/// Seen failing when jq.cron_next was replaced by a copy that evaluates in UTC
/// (JQ_TEST_BREAK=cron_next_utc): hundreds of mismatches in the three non-UTC zones.
#[test]
fn cron_next_agrees_with_croniter() {
    let (_db, mut c) = setup("cron_diff");
    if broken("cron_next_utc") {
        c.batch_execute(
            "ALTER FUNCTION jq.cron_next(text, timestamptz, text) RENAME TO cron_next_real;
             CREATE FUNCTION jq.cron_next(e text, a timestamptz, z text DEFAULT 'UTC') RETURNS timestamptz
             LANGUAGE sql AS $$ SELECT jq.cron_next_real(e, a, 'UTC') $$;",
        )
        .unwrap();
    }
    let mut r = Rng(0x5EED_CAFE);
    let zones = ["UTC", "Asia/Tokyo", "Asia/Kolkata", "America/New_York"];
    let mut cases = Vec::new();
    for _ in 0..3000 {
        let minute = field(&mut r, 0, 59, true);
        let hour = field(&mut r, 0, 23, true);
        let mut dom = field(&mut r, 1, 28, true);
        let month = field(&mut r, 1, 12, true);
        let mut dow = field(&mut r, 0, 6, true);
        // Both day fields restricted: OR in both libraries; keep them to plain values and
        // ranges there (croniter and croner read a stepped `*/n` day field differently).
        if dom != "*" && dow != "*" {
            dom = field(&mut r, 1, 28, false);
            dow = field(&mut r, 0, 6, false);
            if dom == "*" || dow == "*" {
                dom = r.range(1, 28).to_string();
                dow = r.range(0, 6).to_string();
            }
        }
        let expr = format!("{minute} {hour} {dom} {month} {dow}");
        let zone = zones[r.below(zones.len() as u64) as usize];
        let after = 946_684_800 + r.below(35 * 365 * 86400) as i64;
        cases.push((expr, zone, after));
    }
    // The reference: one JSON object per line in, one answer (epoch seconds, or "skip") out.
    let mut input = String::new();
    for (e, z, a) in &cases {
        input.push_str(&serde_json::json!({"cron": e, "tz": z, "after": a}).to_string());
        input.push('\n');
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/cron_reference.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 (with croniter, see .ci/setup) is needed for the differential test");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "cron_reference.py failed (is croniter installed? see .ci/setup)");
    let answers: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect();
    assert_eq!(answers.len(), cases.len());

    let exprs: Vec<&str> = cases.iter().map(|x| x.0.as_str()).collect();
    let tzs: Vec<&str> = cases.iter().map(|x| x.1).collect();
    let afters: Vec<i64> = cases.iter().map(|x| x.2).collect();
    let ours: Vec<Option<i64>> = c
        .query(
            "SELECT extract(epoch FROM jq.cron_next(e, to_timestamp(a), z))::bigint
             FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(e, z, a, n) ORDER BY n",
            &[&exprs, &tzs, &afters],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut compared = 0;
    let mut mismatches = Vec::new();
    for (i, ans) in answers.iter().enumerate() {
        if ans == "skip" {
            continue;
        }
        compared += 1;
        let theirs: i64 = ans.parse().unwrap();
        if ours[i] != Some(theirs) {
            mismatches.push(format!("{:?}: jq {:?}, croniter {theirs}", cases[i], ours[i]));
        }
    }
    assert!(compared > 2500, "only {compared} cases compared");
    assert!(mismatches.is_empty(), "{} of {compared} differ, e.g. {:#?}", mismatches.len(), &mismatches[..mismatches.len().min(10)]);
}

/// pg_dump / pg_restore keep the schedules (timer and counters) and the fire log: after a
/// restore, a pass at an instant already handled enqueues nothing, and the next minute fires.
///
/// Seen failing with JQ_TEST_BREAK=cron_no_dump (jq.schedules and jq.cron_runs removed from
/// pg_extension.extconfig in the source database): the restored database had no schedule.
#[test]
fn dump_and_restore_keep_schedules_and_the_fire_log() {
    let (src, mut c) = setup("cron_dumpsrc");
    c.batch_execute("SELECT jq.schedule('m', '* * * * *', 'cq', '{\"x\": 1}', timezone => 'Europe/Paris')").unwrap();
    let m = hour_ahead(&mut c, 1);
    assert_eq!(tick(&mut c, m), 1);
    let before = counters(&mut c, "m");
    if broken("cron_no_dump") {
        c.batch_execute(
            "UPDATE pg_extension e SET
                 extcondition = (SELECT array_agg(u.c ORDER BY u.i) FROM unnest(e.extconfig, e.extcondition)
                                     WITH ORDINALITY AS u(o, c, i)
                                 WHERE u.o NOT IN ('jq.schedules'::regclass, 'jq.cron_runs'::regclass)),
                 extconfig = (SELECT array_agg(u.o ORDER BY u.i) FROM unnest(e.extconfig) WITH ORDINALITY AS u(o, i)
                              WHERE u.o NOT IN ('jq.schedules'::regclass, 'jq.cron_runs'::regclass))
             WHERE e.extname = 'jq'",
        )
        .unwrap();
    }
    let dst = jq_pg_test::dump_and_restore(&src, "cron_dumpdst");
    let mut r = dst.connect();
    let n: i64 = r.query_one("SELECT count(*) FROM jq.schedules", &[]).unwrap().get(0);
    assert_eq!(n, 1, "schedules lost by the dump");
    assert_eq!(counters(&mut r, "m"), before);
    assert_eq!(runs(&mut r, "m"), runs(&mut c, "m"));
    // The fire log came along: M is not enqueued again, even with the timer moved back.
    r.batch_execute("SELECT jq.alter_schedule('m', cron => '*/1 * * * *')").unwrap();
    assert_eq!(tick(&mut r, m), 0);
    assert_eq!(tick(&mut r, m + 60), 1);
}
