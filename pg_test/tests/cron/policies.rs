//! Misfire and overlap policies, and broken schedules that are flagged and never stop the others.

use jq_pg_test::{claim, complete, Client};
use std::collections::HashMap;

use super::{counters, hour_ahead, jobs_of, runs, setup, tick};

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
