//! The prune duty removes workers stopped or silent past jq.worker_retention() (sql/fleet.sql,
//! jq._prune_workers), with no client ticking, and keeps those that beat.

use jq_pg_test::waiting::wait_until;
use jq_pg_test::*;
use std::time::{Duration, Instant};

use super::served;

/// Negative control `no_worker_prune`: the prune duty without jq._prune_workers; the stopped
/// and the silent worker stay, and the wait below times out (seen failing).
#[test]
fn stopped_and_silent_workers_are_pruned_and_beating_ones_stay() {
    // The retention is a database setting, so the maintenance worker reads it when it connects
    // (it connects once the extension exists, after this setup commits).
    let db = TestDb::with_setup(
        "bgw_fleet",
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET jq.worker_retention = 2', current_database()); END $$;
         CREATE EXTENSION jq;",
    );
    let mut c = db.connect();
    if broken("no_worker_prune") {
        sabotage(&mut c, "jq._maintain(text,timestamptz)",
                 "v_total := v_total + jq._prune_workers(_maintain.now, 1000);", "NULL;", 1);
    }
    served(&db, Duration::from_secs(10));
    c.batch_execute("SELECT jq.create_queue('q')").unwrap();
    let register = |c: &mut Client, name: &str| -> String {
        c.query_one("SELECT jq.register_worker($1, 'h', 1, NULL, ARRAY['q'], 1)::text", &[&name]).unwrap().get(0)
    };
    let stopped = register(&mut c, "stopped");
    let silent = register(&mut c, "silent");
    let beating = register(&mut c, "beating");
    assert!(c.query_one("SELECT jq.deregister_worker($1::text::uuid)", &[&stopped]).unwrap().get::<_, bool>(0));
    let start = Instant::now();
    let mut last_beat = Instant::now();
    wait_until(Duration::from_secs(20), "the stopped and the silent worker pruned", || {
        if last_beat.elapsed() > Duration::from_millis(300) {
            let ok: bool = c.query_one("SELECT jq.worker_beat($1::text::uuid, 0, 0)", &[&beating]).unwrap().get(0);
            assert!(ok, "the beating worker was pruned");
            last_beat = Instant::now();
        }
        let left: i64 = c
            .query_one("SELECT count(*) FROM jq.workers WHERE worker_id IN ($1::text::uuid, $2::text::uuid)",
                       &[&stopped, &silent])
            .unwrap()
            .get(0);
        left == 0
    });
    let took = start.elapsed();
    // Past the 2 s retention, within a few passes of 1 s.
    assert!(took >= Duration::from_millis(1500), "pruned before its retention: {took:?}");
    let names: Vec<String> =
        c.query("SELECT name FROM jq.workers", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(names, vec!["beating"]);
    eprintln!("stopped and silent workers pruned {took:?} after their last beat (retention 2 s)");
}
