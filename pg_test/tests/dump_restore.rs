//! pg_dump / pg_restore keep jq's data and privileges, and the restored database works.
//!
//! Extension tables are left out of dumps unless registered with pg_extension_config_dump, which
//! would silently lose every queue, job and history row; privileges on extension objects are
//! dumped as the difference from pg_init_privs (what the extension scripts granted), so a user's
//! GRANT survives only if that bookkeeping is right. Seen failing: with the registration removed
//! (pg_extension.extconfig cleared in a scratch database), pg_dump writes no COPY for jq's tables
//! at all; JQ_TEST_BREAK=dump_no_config (jq.jobs and jq.cron_runs taken out of extconfig in the
//! source database) makes the content comparison below fail.

use jq_pg_test::fingerprint;
use jq_pg_test::populate::populate;
use jq_pg_test::{admin, broken, claim, complete, dump_and_restore, Client, TestDb, OLDEST_RELEASE};

#[test]
fn pg_dump_and_pg_restore_keep_queues_jobs_history_and_the_id_sequence() {
    let src = TestDb::new("dumpsrc");
    let mut c = src.connect();
    c.batch_execute(
        "SELECT jq.create_queue('d', max_attempts => 7);
         SELECT jq.enqueue('d', jsonb_build_object('n', g)) FROM generate_series(1, 5) g;
         SELECT jq.enqueue('d', '{}', delay => '1 hour');",
    )
    .unwrap();
    for job in claim(&mut c, "d", "w", 2, None) {
        assert!(complete(&mut c, &job));
    }
    let dst = dump_and_restore(&src, "dumpdst");
    let mut r = dst.connect();
    let row = r
        .query_one(
            "SELECT claimable, scheduled, completed, (SELECT max_attempts FROM jq.queues WHERE name = 'd'),
                    (SELECT count(*) FROM jq.executions)
             FROM jq.queue_stats WHERE queue = 'd'",
            &[],
        )
        .unwrap();
    let got: (i64, i64, i64, i32, i64) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(got, (3, 1, 2, 7, 2));
    // The restored database works, and new ids continue after the restored ones.
    let id: i64 = r.query_one("SELECT jq.enqueue('d', '{}')", &[]).unwrap().get(0);
    assert_eq!(id, 7);
    assert_eq!(claim(&mut r, "d", "w", 10, None).len(), 4);
}

/// Cluster-global roles for one test, dropped when it ends (declare before the databases, so
/// that it is dropped after them: a role with privileges in a database cannot be dropped).
struct Roles(Vec<String>);

impl Roles {
    fn new(tags: &[&str]) -> Roles {
        let names: Vec<String> = tags.iter().map(|t| format!("jqt_{t}_{}", std::process::id())).collect();
        let mut a = admin();
        for n in &names {
            a.batch_execute(&format!("DROP ROLE IF EXISTS {n}; CREATE ROLE {n} NOLOGIN")).unwrap();
        }
        Roles(names)
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        let mut a = admin();
        for n in &self.0 {
            let _ = a.batch_execute(&format!("DROP ROLE IF EXISTS {n}"));
        }
    }
}

/// Whether this build has per-queue grants (jq.grant, version 0.2.0 on).
fn has_queue_grants(c: &mut Client) -> bool {
    c.query_one("SELECT EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'grant' AND pronamespace = 'jq'::regnamespace)", &[])
        .unwrap()
        .get(0)
}

/// The user's own privileges on jq's objects: a function granted to a role, one revoked from
/// PUBLIC (a no-op from 0.2.0 on, where jq revokes them all), a view made readable. Functions
/// are named without argument lists, which 0.2.0 changes.
fn user_grants(c: &mut Client, app: &str) {
    c.batch_execute(&format!(
        "GRANT USAGE ON SCHEMA jq TO {app};
         GRANT EXECUTE ON FUNCTION jq.enqueue TO {app};
         REVOKE EXECUTE ON FUNCTION jq.cron_next FROM PUBLIC;
         GRANT SELECT ON jq.queue_stats TO {app};"
    ))
    .expect("user grants");
}

/// Both databases' contents (every row of every jq table, the id sequence) and catalog
/// fingerprints (definitions, ACLs, pg_init_privs, extconfig) are equal.
fn assert_same(src: &mut Client, dst: &mut Client) {
    let (a, b) = (fingerprint::contents(src), fingerprint::contents(dst));
    for (table, rows) in &a {
        let restored = b.get(table).cloned().unwrap_or_default();
        let lost: Vec<&String> = rows.iter().filter(|r| !restored.contains(r)).collect();
        let extra: Vec<&String> = restored.iter().filter(|r| !rows.contains(r)).collect();
        assert!(
            lost.is_empty() && extra.is_empty(),
            "{table}: {} rows, {} restored; lost {lost:#?}; not in the source {extra:#?}",
            rows.len(),
            restored.len()
        );
    }
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    let (text, counted) = fingerprint::diff("source", &fingerprint::catalog(src), "restored", &fingerprint::catalog(dst));
    assert_eq!(counted, 0, "the restored catalog differs:\n{text}");
}

/// A database with queues, jobs in every state (running ones under live leases), schedules, the
/// fire log, execution history of every outcome, per-queue grants (when this build has
/// jq.grant) and a user's own GRANT / REVOKE on jq objects: `pg_dump -Fc` and `pg_restore` into
/// a new database keep every row, the sequence and every ACL (catalog fingerprints equal), and
/// the restored database works: the leases taken before the dump heartbeat and complete there,
/// new claims and completes, the next cron minute fires once, grants still decide who may
/// enqueue.
#[test]
fn dump_and_restore_keep_every_state_grants_and_work() {
    let roles = Roles::new(&["dump_app", "dump_tenant"]);
    let (app, tenant) = (roles.0[0].clone(), roles.0[1].clone());
    let src = TestDb::new("dump_all_src");
    let mut c = src.connect();
    let mut w = src.connect();
    let pop = populate(&mut c, &mut w);
    user_grants(&mut c, &app);
    let grants = has_queue_grants(&mut c);
    if grants {
        c.batch_execute(&format!(
            "SELECT jq.grant('pop_work', '{tenant}', 'enqueue');
             SELECT jq.grant('pop_keyed', '{tenant}', 'work');"
        ))
        .expect("jq.grant");
    } else {
        // TODO(0.2.0): remove this branch once jq.grant has landed on main.
        eprintln!("jq.grant is not in this build: the per-queue grants part of the test is skipped");
    }
    if broken("dump_no_config") {
        c.batch_execute(
            "UPDATE pg_extension e SET
                 extcondition = (SELECT array_agg(u.c ORDER BY u.i) FROM unnest(e.extconfig, e.extcondition)
                                     WITH ORDINALITY AS u(o, c, i)
                                 WHERE u.o NOT IN ('jq.jobs'::regclass, 'jq.cron_runs'::regclass)),
                 extconfig = (SELECT array_agg(u.o ORDER BY u.i) FROM unnest(e.extconfig) WITH ORDINALITY AS u(o, i)
                              WHERE u.o NOT IN ('jq.jobs'::regclass, 'jq.cron_runs'::regclass))
             WHERE e.extname = 'jq'",
        )
        .unwrap();
    }
    let dst = dump_and_restore(&src, "dump_all_dst");
    let mut r = dst.connect();
    assert_same(&mut c, &mut r);

    // Privileges, spelled out (the fingerprint compared them already).
    let privs: (bool, bool, bool) = r
        .query_one(
            "SELECT has_function_privilege($1, (SELECT p.oid FROM pg_proc p WHERE p.proname = 'enqueue'
                                                    AND p.pronamespace = 'jq'::regnamespace), 'EXECUTE'),
                    has_function_privilege('public', 'jq.cron_next(text,timestamptz,text)', 'EXECUTE'),
                    has_table_privilege($1, 'jq.queue_stats', 'SELECT')",
            &[&app],
        )
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .unwrap();
    assert_eq!(privs, (true, false, true), "(app may enqueue, PUBLIC may call cron_next, app may read queue_stats)");

    // The restored database works: the old leases, new claims, cron.
    for j in &pop.held {
        let ok: bool = r
            .query_one("SELECT lease_expires_at IS NOT NULL FROM jq.heartbeat($1, $2)", &[&j.id, &j.token])
            .unwrap()
            .get(0);
        assert!(ok, "heartbeat of job {} with its token after the restore", j.id);
        assert!(complete(&mut r, j));
    }
    assert!(complete(&mut r, &pop.keyed_head));
    assert_eq!(claim(&mut r, "pop_keyed", "w", 5, None).len(), 1, "the key's next job");
    let id: i64 = r.query_one("SELECT jq.enqueue('pop_work', '{\"restored\": true}')", &[]).unwrap().get(0);
    let max: i64 = c.query_one("SELECT max(id) FROM jq.jobs", &[]).unwrap().get(0);
    assert!(id > max, "new ids continue after the restored ones");
    let jobs = claim(&mut r, "pop_work", "w", 100, None);
    assert!(jobs.iter().any(|j| j.id == id));
    for j in &jobs {
        assert!(complete(&mut r, j));
    }
    let fired: i32 = r.query_one("SELECT jq.cron_tick(to_timestamp($1::bigint))", &[&pop.next_fire]).unwrap().get(0);
    assert_eq!(fired, 1, "the next minute fires in the restored database");
    let again: i32 = r.query_one("SELECT jq.cron_tick(to_timestamp($1::bigint) - interval '60 seconds')", &[&pop.next_fire]).unwrap().get(0);
    assert_eq!(again, 0, "the minute fired before the dump is in the restored fire log");
    if grants {
        // The tenant may enqueue to pop_work and to nothing else.
        r.batch_execute(&format!("SET ROLE {tenant}")).unwrap();
        r.batch_execute("SELECT jq.enqueue('pop_work', '{\"tenant\": 1}')").expect("granted enqueue after the restore");
        let e = r.batch_execute("SELECT jq.enqueue('pop_cron', '{\"tenant\": 1}')");
        assert_eq!(jq_pg_test::sqlstate(e), "42501", "enqueue to a queue not granted");
        r.batch_execute("RESET ROLE").unwrap();
    }
}

/// A database populated under the oldest release and upgraded dumps and restores into the
/// current version (the restore runs CREATE EXTENSION jq, a fresh install, then COPY with column
/// lists): the same rows, the same catalog as the source, and it works.
#[test]
fn a_dump_of_an_upgraded_database_restores_into_a_fresh_install() {
    let src = TestDb::with_setup("dump_upg_src", &format!("CREATE EXTENSION jq VERSION '{OLDEST_RELEASE}'"));
    let mut c = src.connect();
    let mut w = src.connect();
    let pop = populate(&mut c, &mut w);
    c.batch_execute("ALTER EXTENSION jq UPDATE").unwrap();
    let dst = dump_and_restore(&src, "dump_upg_dst");
    let mut r = dst.connect();
    assert_same(&mut c, &mut r);
    for j in &pop.held {
        assert!(complete(&mut r, j), "complete of job {} after upgrade, dump and restore", j.id);
    }
    let fired: i32 = r.query_one("SELECT jq.cron_tick(to_timestamp($1::bigint))", &[&pop.next_fire]).unwrap().get(0);
    assert_eq!(fired, 1);
}

/// A dump taken under the oldest release, not upgraded, restores into the current version. Its
/// history comes as `COPY jq.executions`, which in 0.2.0 is a view (a completed execution is its
/// job row): the view's INSTEAD OF INSERT trigger writes the rows to jq.execution_log, and the
/// restored view shows exactly the history the source had, each completed execution once.
/// Seen failing by hand, with the trigger taken out of the installed jq--0.2.0.sql: pg_restore
/// stopped at "cannot copy to view "executions""; with the view's filter on the log's completed
/// rows taken out instead: "the restored history" differed (completions shown twice).
#[test]
fn a_dump_of_the_oldest_release_restores_its_history_into_the_current_version() {
    let src = TestDb::with_setup("dump_old_src", &format!("CREATE EXTENSION jq VERSION '{OLDEST_RELEASE}'"));
    let mut c = src.connect();
    let mut w = src.connect();
    populate(&mut c, &mut w);
    let history = |c: &mut Client| -> Vec<String> {
        c.query("SELECT to_jsonb(t)::text FROM jq.executions t ORDER BY 1", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let before = history(&mut c);
    let outcomes: i64 = c.query_one("SELECT count(DISTINCT outcome) FROM jq.executions", &[]).unwrap().get(0);
    assert!(outcomes >= 3 && before.iter().any(|r| r.contains("\"completed\"")), "history of several outcomes: {before:?}");
    let dst = dump_and_restore(&src, "dump_old_dst");
    let mut r = dst.connect();
    let version: String = r.query_one("SELECT extversion FROM pg_extension WHERE extname = 'jq'", &[]).unwrap().get(0);
    assert_ne!(version, OLDEST_RELEASE);
    assert_eq!(history(&mut r), before, "the restored history");
}
