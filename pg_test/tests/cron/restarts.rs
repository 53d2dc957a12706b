//! Restarts and a dump/restore neither reset nor lose a schedule's timer and fire log.

use jq_pg_test::broken;

use super::{counters, hour_ahead, runs, setup, tick};

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
