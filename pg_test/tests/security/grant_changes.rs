//! Grants that change: a schedule fires only while its creator may enqueue; concurrent grants queue up.

use jq_pg_test::{broken, sabotage, Client, TestDb};

use super::Roles;

/// A schedule fires with the rights of the role that defined it: revoked or dropped, its fires
/// are logged as failed and skipped, and the other schedules and the pass go on.
#[test]
fn a_schedule_fires_only_while_its_creator_may_enqueue() {
    let roles;
    let db = TestDb::new("sec_cron");
    let mut c = db.connect();
    let mut a = jq_pg_test::admin();
    roles = Roles::new(&mut a, "seccron", &[("owner", "LOGIN"), ("gone", "LOGIN")]);
    let (owner, gone) = (roles.get("owner").to_string(), roles.get("gone").to_string());
    c.batch_execute("SELECT jq.create_queue('q'); SELECT jq.schedule('by_admin', '* * * * *', 'q');").unwrap();
    for r in [&owner, &gone] {
        c.execute("SELECT jq.grant('q', $1::text::regrole, 'admin')", &[r]).unwrap();
        let name = format!("by_{}", if r == &owner { "owner" } else { "gone" });
        let mut t = c.transaction().unwrap();
        t.batch_execute(&format!("SET LOCAL ROLE {r}; SELECT jq.schedule('{name}', '* * * * *', 'q')")).unwrap();
        t.commit().unwrap();
    }
    let creator: String =
        c.query_one("SELECT created_by::text FROM jq.schedules WHERE name = 'by_owner'", &[]).unwrap().get(0);
    assert_eq!(creator, owner);
    let fired = |c: &mut Client, at: &str| -> i32 {
        c.query_one(&format!("SELECT jq.cron_tick(date_trunc('minute', now()) + interval '{at}')"), &[]).unwrap().get(0)
    };
    assert_eq!(fired(&mut c, "1 minute"), 3);
    c.execute("SELECT jq.revoke('q', $1::text::regrole, 'admin')", &[&owner]).unwrap();
    drop(c);
    let mut c2 = db.connect();
    // What jq.grant gave it in this database (EXECUTE on the per-queue admin functions).
    c2.batch_execute(&format!("DROP OWNED BY {gone}")).unwrap();
    a.batch_execute(&format!("DROP ROLE {gone}")).unwrap();
    assert_eq!(fired(&mut c2, "2 minutes"), 1, "only the admin's schedule may fire");
    let outcomes: Vec<(String, String, Option<String>)> = c2
        .query(
            "SELECT s.name, r.outcome, left(s.last_error, 5) FROM jq.schedules s
               JOIN jq.cron_runs r ON r.schedule = s.name
              WHERE r.fire_time = date_trunc('minute', now()) + interval '2 minutes' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            ("by_admin".into(), "enqueued".into(), None),
            ("by_gone".into(), "failed".into(), Some("42704".into())),
            ("by_owner".into(), "failed".into(), Some("42501".into())),
        ]
    );
    // Maintenance disables and unbinds the dropped creator's schedule; enabling it binds it to
    // the role that does.
    c2.batch_execute("SELECT jq.tick()").unwrap();
    let row = c2
        .query_one("SELECT enabled, created_by IS NULL, last_error LIKE 'disabled:%' FROM jq.schedules WHERE name = 'by_gone'", &[])
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, bool>(1), row.get::<_, bool>(2)), (false, true, true));
    let by: String = c2
        .query_one("SELECT (jq.alter_schedule('by_gone', enabled => true)).created_by::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(by, "postgres");
    drop(c2);
    drop(db);
}

/// Two jq.grant / jq.revoke calls at once both run GRANT or REVOKE EXECUTE on the same pg_proc
/// rows (a per-queue admin grant, or a role's last one revoked), or GRANT jq_producer TO the same
/// role. Without a lock of their own the second waited for the first's catalog row and then
/// failed with XX000 "tuple concurrently updated" (23505 on pg_auth_members for the membership)
/// once the first committed; with `LOCK TABLE jq.queue_grants IN SHARE ROW EXCLUSIVE MODE` it
/// waits for the first to end and succeeds. Negative control: JQ_TEST_BREAK=grants_unserialized
/// (both functions without that lock).
#[test]
fn concurrent_grants_and_revokes_queue_up() {
    let mut a = jq_pg_test::admin();
    let roles = Roles::new(&mut a, "grantrace", &[("r1", ""), ("r2", ""), ("r3", ""), ("r4", ""), ("r5", "")]);
    let db = TestDb::new("grantrace");
    let mut c = db.connect();
    if broken("grants_unserialized") {
        sabotage(&mut c, "jq.grant(text,regrole,text,bigint)", "    LOCK TABLE jq.queue_grants IN SHARE ROW EXCLUSIVE MODE;\n", "", 1);
        sabotage(&mut c, "jq.revoke(text,regrole,text)", "    LOCK TABLE jq.queue_grants IN SHARE ROW EXCLUSIVE MODE;\n", "", 1);
    }
    let (r1, r2, r3, r4, r5) = (roles.get("r1"), roles.get("r2"), roles.get("r3"), roles.get("r4"), roles.get("r5"));
    c.batch_execute(&format!(
        "SELECT jq.create_queue('g1'); SELECT jq.create_queue('g2'); SELECT jq.grant('g2', '{r4}', 'admin');"
    ))
    .unwrap();
    let cases = [
        (format!("SELECT jq.grant('g1', '{r1}', 'admin')"), format!("SELECT jq.grant('g2', '{r2}', 'admin')")),
        (format!("SELECT jq.grant('g1', '{r3}', 'enqueue')"), format!("SELECT jq.grant('g2', '{r3}', 'admin')")),
        (format!("SELECT jq.grant('g1', '{r5}', 'admin')"), format!("SELECT jq.revoke('g2', '{r4}', 'admin')")),
    ];
    let mut failures = Vec::new();
    for (first, second) in cases {
        let mut t1 = db.connect();
        t1.batch_execute(&format!("BEGIN; {first};")).unwrap();
        let mut t2 = db.connect();
        let pid = jq_pg_test::backend_pid(&mut t2);
        let other = {
            let second = second.clone();
            std::thread::spawn(move || {
                t2.simple_query(&second).map(|_| ()).map_err(|e| e.code().map(|s| s.code().to_string()))
            })
        };
        jq_pg_test::await_lock_wait(&mut c, pid, &format!("{second} neither waited nor ended"), || other.is_finished());
        t1.batch_execute("COMMIT").unwrap();
        let got = other.join().unwrap();
        if got.is_err() {
            failures.push(format!("{first} then {second}: {got:?}"));
        }
    }
    assert!(failures.is_empty(), "the second call must wait and succeed:\n{}", failures.join("\n"));
    // Every grant is in place (and r4's admin grant gone).
    let n: i64 = c.query_one("SELECT count(*) FROM jq.queue_grants", &[]).unwrap().get(0);
    assert_eq!(n, 5, "g1: r1 admin, r3 enqueue, r5 admin; g2: r2 admin, r3 admin");
    drop(c);
    drop(db);
}
