//! Which databases the launcher serves, and workers that exit, are terminated or meet DROP DATABASE.

use jq_pg_test::*;
use std::time::{Duration, Instant};

use super::{eventually, served, status};

/// A database outside jq.databases gets no worker, and is not silent about it (capacity
/// exhausted and jobs silently not run; past 64 databases the launcher has no slot for
/// a database either): jq.status() called there has a row in state `not served` saying why.
/// Seen failing before that row existed (no row for the database at all).
#[test]
fn a_new_database_with_jq_is_served_within_seconds_and_others_are_not() {
    let db = TestDb::new("bgw_new");
    served(&db, Duration::from_secs(5));
    let other = TestDb::new("nobgw");
    let mut c = other.connect();
    std::thread::sleep(Duration::from_millis(1500));
    let st = status(&mut c, &other.name);
    match &st {
        Some((state, None, 0, Some(why))) if state == "not served" && why.contains("jq.databases") => {}
        _ => panic!("expected a 'not served' row without a worker: {st:?}"),
    }
}

/// A database without jq is rechecked every 10 s by starting a worker there, which shows as
/// `starting`, then `running` until its check, or `waiting for a worker slot` while the pool is
/// full; `jqctl metrics` exported those as a maintenance worker down or up (a false
/// JqMaintenanceStalled for `postgres` while the pool is full). jq.status() now keeps saying
/// `no extension` through a recheck. Seen failing with that mapping removed from `_status`
/// (a `starting` / `running` row caught between the 5-ms polls).
#[test]
fn a_database_without_jq_stays_no_extension_through_its_rechecks() {
    let db = TestDb::new("bgw_recheck");
    let mut c = db.connect();
    let noext = format!("jqt_bgw_recheck_noext_{}", std::process::id());
    let mut a = admin();
    a.batch_execute(&format!("DROP DATABASE IF EXISTS {noext} WITH (FORCE)")).unwrap();
    a.batch_execute(&format!("CREATE DATABASE {noext}")).unwrap();
    let first = eventually(Duration::from_secs(20), || {
        status(&mut c, &noext).map(|s| s.0 == "no extension").unwrap_or(false)
    });
    assert!(first.is_some(), "{noext} never reported: {:?}", status(&mut c, &noext));
    // Two rechecks (every 10 s), polled every 5 ms.
    let mut seen = std::collections::BTreeSet::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(21) {
        if let Some(s) = status(&mut c, &noext) {
            seen.insert(s.0);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    a.batch_execute(&format!("DROP DATABASE IF EXISTS {noext} WITH (FORCE)")).unwrap();
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec!["no extension".to_string()]);
}

#[test]
fn two_databases_are_both_served() {
    let a = TestDb::new("bgw_two_a");
    let b = TestDb::new("bgw_two_b");
    for db in [&a, &b] {
        let mut c = db.connect();
        c.batch_execute("SELECT jq.create_queue('q')").unwrap();
        // Due in 1 s: only a worker's promotion makes it claimable.
        c.batch_execute("SELECT jq.enqueue('q', '{}', delay => '1 second')").unwrap();
    }
    for db in [&a, &b] {
        let mut c = db.connect();
        let got = eventually(Duration::from_secs(5), || !claim(&mut c, "q", "w", 1, None).is_empty());
        assert!(got.is_some(), "{}: the scheduled job was never promoted", db.name);
    }
}

#[test]
fn terminated_workers_and_launcher_come_back_within_seconds() {
    let db = TestDb::new("bgw_kill");
    let pid = served(&db, Duration::from_secs(5));
    let mut a = admin();
    a.execute("SELECT pg_terminate_backend($1)", &[&pid]).unwrap();
    let mut c = db.connect();
    let back = eventually(Duration::from_secs(5), || {
        matches!(status(&mut c, &db.name), Some((s, Some(p), _, _)) if s == "running" && p != pid)
    });
    assert!(back.is_some(), "worker not back: {:?}", status(&mut c, &db.name));
    eprintln!("maintenance worker back after {:?}", back.unwrap());
    // The launcher too; afterwards the worker still serves (the job gets promoted).
    a.batch_execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'jq launcher'",
    )
    .unwrap();
    let launcher = eventually(Duration::from_secs(5), || {
        a.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
        a.query_one("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'jq launcher'", &[])
            .unwrap()
            .get::<_, i64>(0)
            == 1
    });
    assert!(launcher.is_some(), "launcher not back");
    // Everything connected to the database terminated, worker included.
    a.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        &[&db.name],
    )
    .unwrap();
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('q'); SELECT jq.enqueue('q', '{}', delay => '1 second')").unwrap();
    let rows = c.query("SELECT id FROM jq.claim('q', 'w', wait => '6 s')", &[]).unwrap();
    assert_eq!(rows.len(), 1, "no promotion after the terminations");
}

#[test]
fn drop_database_and_template_use_are_not_blocked_by_the_worker() {
    let db = TestDb::new("bgw_drop");
    served(&db, Duration::from_secs(5));
    let mut a = admin();
    // Without FORCE: refused while another session is connected, so the worker must leave.
    let copy = format!("{}_copy", db.name);
    a.batch_execute(&format!("CREATE DATABASE {copy} TEMPLATE {}", db.name)).expect("template in use");
    a.batch_execute(&format!("DROP DATABASE {copy}")).expect("drop the copy");
    a.batch_execute(&format!("DROP DATABASE {}", db.name)).expect("drop refused");
}

#[test]
fn drop_and_create_extension_stop_and_start_the_worker() {
    let db = TestDb::new("bgw_ext");
    let pid = served(&db, Duration::from_secs(5));
    let mut c = db.connect();
    c.batch_execute("DROP EXTENSION jq").unwrap();
    let mut a = admin();
    let gone = eventually(Duration::from_secs(4), || {
        a.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
        a.query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", &[&pid]).unwrap().get::<_, i64>(0) == 0
    });
    assert!(gone.is_some(), "worker still running after DROP EXTENSION");
    c.batch_execute("CREATE EXTENSION jq").unwrap();
    served(&db, Duration::from_secs(4));
}

/// SIGTERM reaches a maintenance worker that waits for a lock (PostgreSQL's die handler).
/// Seen failing with pgrx's flag-only SIGTERM handler: the worker stayed, waiting. The lock is
/// on jq.queues, which every pass reads: a lock on jq.jobs no longer makes a duty wait (it fails
/// at once, robustness/held_locks.rs), only DDL on jq's other tables can.
#[test]
fn a_worker_waiting_for_a_lock_can_be_terminated() {
    let db = TestDb::new("bgw_lockterm");
    let pid = served(&db, Duration::from_secs(5));
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; LOCK TABLE jq.queues IN ACCESS EXCLUSIVE MODE").unwrap();
    let mut a = admin();
    let blocked = eventually(Duration::from_secs(4), || waiting_on_lock(&mut a, pid));
    assert!(blocked.is_some(), "the worker never waited for the lock");
    a.execute("SELECT pg_terminate_backend($1)", &[&pid]).unwrap();
    let gone = eventually(Duration::from_secs(3), || {
        a.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
        a.query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", &[&pid]).unwrap().get::<_, i64>(0) == 0
    });
    holder.batch_execute("ROLLBACK").unwrap();
    assert!(gone.is_some(), "SIGTERM did not interrupt the lock wait");
    served(&db, Duration::from_secs(5));
}

/// Only a role that may drop a database can make its worker step aside for DROP DATABASE.
#[test]
fn a_refused_drop_database_does_not_suspend_maintenance() {
    let db = TestDb::new("bgw_mallory");
    served(&db, Duration::from_secs(5));
    let mut a = admin();
    let role = format!("mallory_{}", std::process::id());
    a.batch_execute(&format!("DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN")).unwrap();
    let mut m = Client::connect(&format!("{} user={role}", conninfo("postgres").replace("user=postgres", "")), NoTls).unwrap();
    assert_eq!(sqlstate(m.batch_execute(&format!("DROP DATABASE {}", db.name))), "42501");
    drop(m);
    let mut c = db.connect();
    let (state, _, _, _) = status(&mut c, &db.name).unwrap();
    assert_eq!(state, "running");
    a.batch_execute(&format!("DROP ROLE {role}")).unwrap();
}
