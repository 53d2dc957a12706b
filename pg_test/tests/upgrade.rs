//! Upgrades: `ALTER EXTENSION jq UPDATE` from the oldest frozen release (sql/releases, installed
//! next to the current version by pg_test/run) must give the same extension as a fresh
//! `CREATE EXTENSION jq`, and must keep a populated database's rows and the leases workers hold.
//! See docs/upgrades.md.

use jq_pg_test::fingerprint;
use jq_pg_test::populate::populate;
use jq_pg_test::{claim, complete, released_versions, TestDb, OLDEST_RELEASE};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A fresh install and an install of each released version (sql/releases) upgraded to the
/// current version have the same catalog fingerprint (pg_test/src/fingerprint.rs: every member's definition, ACLs,
/// comments, constraints, indexes, enum labels, extconfig, pg_init_privs, the schema's ACL).
///
/// Seen failing (negative control, by hand): with a deliberately broken upgrade script installed
/// in place of the real one (a changed body of jq.max_payload_bytes, `REVOKE EXECUTE ON FUNCTION
/// jq.cancel(bigint) FROM PUBLIC`, `ALTER TABLE jq.schedules ADD COLUMN note text`) it reported
/// five differences: the function definition as a line diff, jq.cancel's ACL, its pg_init_privs
/// row, the extra column, and jq.schedules' column order (counted: jq.schedule returns the row).
/// JQ_TEST_BREAK=upgrade_misses_function reproduces the first kind without replacing files.
#[test]
fn fresh_install_equals_upgraded_install() {
    let versions = released_versions();
    assert_eq!(versions.first().map(String::as_str), Some(OLDEST_RELEASE), "OLDEST_RELEASE is not the oldest of sql/releases");
    let fresh = TestDb::fresh("upg_fresh");
    let fa = fingerprint::catalog(&mut fresh.connect());
    if std::env::var_os("JQ_TEST_SHOW_FINGERPRINT").is_some() {
        for (k, v) in &fa {
            eprintln!("{k} = {v}");
        }
    }
    assert!(fa.len() > 300, "implausibly small fingerprint: {} lines", fa.len());
    // From every released version (each must have an update path to the current one).
    for from in &versions {
        let upgraded = TestDb::with_setup("upg_upgraded", &format!("CREATE EXTENSION jq VERSION '{from}'; ALTER EXTENSION jq UPDATE"));
        let mut b = upgraded.connect();
        if jq_pg_test::broken("upgrade_misses_function") {
            // What an upgrade script that forgot one function's new body leaves behind.
            b.batch_execute(
                "CREATE OR REPLACE FUNCTION jq.max_error_length() RETURNS integer
                 LANGUAGE sql IMMUTABLE AS $$ SELECT 1 $$",
            )
            .unwrap();
        }
        let version: String =
            b.query_one("SELECT extversion FROM pg_extension WHERE extname = 'jq'", &[]).unwrap().get(0);
        assert_ne!(&version, from, "ALTER EXTENSION jq UPDATE did not upgrade");
        let fb = fingerprint::catalog(&mut b);
        let (text, counted) = fingerprint::diff("fresh", &fa, "upgraded", &fb);
        if !text.is_empty() {
            eprintln!("fresh install vs {from} upgraded to {version}:\n{text}");
        }
        assert_eq!(counted, 0, "{from} upgraded differs from a fresh install in {counted} places:\n{text}");
    }
}

/// Rows of `table` from a [`fingerprint::contents`] snapshot, minus those of queue `skip`.
fn rows_without(snapshot: &BTreeMap<String, Vec<String>>, table: &str, skip: &str) -> Vec<Value> {
    snapshot[table]
        .iter()
        .map(|r| serde_json::from_str::<Value>(r).unwrap_or_else(|_| Value::String(r.clone())))
        .filter(|v| v.get("queue").and_then(Value::as_str) != Some(skip) && v.get("name").and_then(Value::as_str) != Some(skip))
        .collect()
}

/// Every row before the upgrade is still there after it, column for column (columns the upgrade
/// added are ignored, and listed); returns the problems found.
fn compare_rows(before: &BTreeMap<String, Vec<String>>, after: &BTreeMap<String, Vec<String>>, skip: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for table in before.keys() {
        let Some(_) = after.get(table) else {
            problems.push(format!("{table}: gone after the upgrade"));
            continue;
        };
        if before[table].first().is_some_and(|r| r.starts_with("last_value ")) {
            // A sequence: it may only have moved on (the workers enqueue during the upgrade).
            let value = |s: &BTreeMap<String, Vec<String>>| -> i64 { s[table][0].split(' ').nth(1).unwrap().parse().unwrap() };
            if value(after) < value(before) {
                problems.push(format!("{table}: went back from {} to {}", before[table][0], after[table][0]));
            }
            continue;
        }
        let old = rows_without(before, table, skip);
        let new = rows_without(after, table, skip);
        if old.len() != new.len() {
            problems.push(format!("{table}: {} rows before, {} after", old.len(), new.len()));
        }
        let mut added = BTreeSet::new();
        let restricted: BTreeSet<String> = new
            .iter()
            .map(|n| match (n, old.first()) {
                (Value::Object(m), Some(Value::Object(o))) => {
                    added.extend(m.keys().filter(|k| !o.contains_key(*k)).cloned());
                    Value::Object(m.iter().filter(|(k, _)| o.contains_key(*k)).map(|(k, v)| (k.clone(), v.clone())).collect())
                        .to_string()
                }
                _ => n.to_string(),
            })
            .collect();
        for o in &old {
            if !restricted.contains(&o.to_string()) {
                problems.push(format!("{table}: row lost or changed by the upgrade: {o}"));
            }
        }
        if !added.is_empty() {
            eprintln!("{table}: columns added by the upgrade: {added:?}");
        }
    }
    problems
}

/// `ALTER EXTENSION jq UPDATE` from the oldest release on a populated database
/// ([`jq_pg_test::populate::populate`]: jobs in every state, schedules, fire log, executions of
/// every outcome) while a worker connection holds leases and four worker threads drain another
/// queue through the upgrade:
/// - every row of every jq table is still there, column for column (added columns aside);
/// - the leases taken before the upgrade still heartbeat, complete, fail and release with their
///   tokens, and the key slot they hold passes on; new claims work; a dead job can be retried;
/// - `jq.cron_tick` fires the next minute, once; `jq.queue_stats` reads every queue;
/// - the drained queue ends with each job completed exactly once (calls that failed during the
///   upgrade were retried, and are printed);
/// - the upgraded database has the catalog fingerprint of a fresh install.
///
/// Seen failing with JQ_TEST_BREAK=upgrade_rewrites_rows (the upgrade transaction also gives
/// running jobs new lease tokens and deletes the fire log): the row comparison listed the
/// running jobs whose lease_token changed and the lost jq.cron_runs row.
#[test]
fn upgrade_of_a_populated_database_while_workers_hold_leases() {
    let db = TestDb::with_setup("upg_pop", &format!("CREATE EXTENSION jq VERSION '{OLDEST_RELEASE}'"));
    let mut c = db.connect();
    let mut w = db.connect();
    let pop = populate(&mut c, &mut w);
    c.batch_execute(
        "SELECT jq.create_queue('upg_busy');
         SELECT jq.enqueue_many('upg_busy', (SELECT jsonb_agg(jsonb_build_object('n', g)) FROM generate_series(1, 200) g));",
    )
    .unwrap();
    let before = fingerprint::contents(&mut c);

    // Four workers drain upg_busy across the upgrade, retrying a call that fails; until the
    // upgrade has ended each completed job is replaced by a new one (a steady stream).
    let upgraded = Arc::new(AtomicBool::new(false));
    let streamed = Arc::new(AtomicUsize::new(0));
    let completed_before = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let (mut wc, upgraded, errors) = (db.connect(), upgraded.clone(), errors.clone());
            let (completed_before, streamed) = (completed_before.clone(), streamed.clone());
            thread::spawn(move || {
                let mut done = 0usize;
                loop {
                    let rows = match wc.query("SELECT id, lease_token FROM jq.claim('upg_busy', $1, 10)", &[&format!("b{i}")]) {
                        Ok(r) => r,
                        Err(e) => {
                            errors.lock().unwrap().push(format!("claim: {e}"));
                            continue;
                        }
                    };
                    if rows.is_empty() {
                        if upgraded.load(SeqCst) {
                            return done;
                        }
                        thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    for r in rows {
                        let (id, token): (i64, uuid::Uuid) = (r.get(0), r.get(1));
                        loop {
                            match wc.query_one("SELECT jq.complete($1, $2)", &[&id, &token]) {
                                Ok(row) => {
                                    assert!(row.get::<_, bool>(0), "complete of job {id} returned false");
                                    break;
                                }
                                Err(e) => errors.lock().unwrap().push(format!("complete: {e}")),
                            }
                            assert!(errors.lock().unwrap().len() < 100, "too many errors: {:?}", errors.lock().unwrap());
                        }
                        done += 1;
                        if !upgraded.load(SeqCst) {
                            completed_before.fetch_add(1, SeqCst);
                            loop {
                                match wc.execute("SELECT jq.enqueue('upg_busy', '{}')", &[]) {
                                    Ok(_) => break,
                                    Err(e) => errors.lock().unwrap().push(format!("enqueue: {e}")),
                                }
                                assert!(errors.lock().unwrap().len() < 100, "too many errors: {:?}", errors.lock().unwrap());
                            }
                            streamed.fetch_add(1, SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    // The workers are under way (some upg_busy jobs completed) before the upgrade starts; a
    // fixed sleep could end before their first claim on a loaded machine.
    let t = Instant::now();
    while completed_before.load(SeqCst) < 20 {
        assert!(t.elapsed() < Duration::from_secs(30), "the workers completed no upg_busy job within 30 s");
        thread::sleep(Duration::from_millis(10));
    }
    let mut u = db.connect();
    let t = Instant::now();
    let at_start = completed_before.load(SeqCst);
    if jq_pg_test::broken("upgrade_rewrites_rows") {
        u.batch_execute(
            "BEGIN; ALTER EXTENSION jq UPDATE;
             UPDATE jq.jobs SET lease_token = gen_random_uuid() WHERE state = 'running' AND queue <> 'upg_busy';
             DELETE FROM jq.cron_runs; COMMIT;",
        )
        .unwrap();
    } else {
        // Without the cancel loop for jq.executions' lock in the upgrade's stateful part, this
        // could deadlock with a worker's jq.complete (docs/upgrades.md, "One transaction").
        u.batch_execute("ALTER EXTENSION jq UPDATE").expect("ALTER EXTENSION jq UPDATE");
    }
    let took = t.elapsed();
    upgraded.store(true, SeqCst);
    let drained: usize = workers.into_iter().map(|h| h.join().unwrap()).sum();
    let errors = errors.lock().unwrap().clone();
    let busy_before = completed_before.load(SeqCst);
    eprintln!(
        "upgrade took {took:?}; upg_busy: {at_start} jobs completed before it, {} while it ran, {} after; {} failed calls retried{}",
        busy_before - at_start,
        drained.saturating_sub(busy_before),
        errors.len(),
        if errors.is_empty() { String::new() } else { format!(": {errors:#?}") }
    );
    let total = 200 + streamed.load(SeqCst);
    assert_eq!(drained, total);
    assert!(busy_before > 0 && busy_before < total, "the upgrade did not run while the workers were draining");
    let version: String = c.query_one("SELECT extversion FROM pg_extension WHERE extname = 'jq'", &[]).unwrap().get(0);
    assert_ne!(version, OLDEST_RELEASE);

    // Every row is still there. The history table became jq.execution_log and jq.executions a
    // view that adds the completed executions from their job rows: the view must show exactly
    // the rows the table had (the upgrade deletes the log's completed rows whose job is there).
    // Seen failing by hand with that DELETE taken out of the installed upgrade script:
    // "jq.executions: 9 rows before, 13 after".
    let mut after = fingerprint::contents(&mut c);
    let history: Vec<String> = c
        .query("SELECT to_jsonb(t)::text FROM jq.executions t ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    after.insert("jq.executions".to_string(), history);
    let problems = compare_rows(&before, &after, "upg_busy");
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
    let busy: Vec<(String, i64)> = c
        .query("SELECT state::text, count(*) FROM jq.jobs WHERE queue = 'upg_busy' GROUP BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(busy, [("completed".to_string(), total as i64)]);
    let twice: i64 = c
        .query_one(
            "SELECT count(*) FROM (SELECT job_id FROM jq.executions WHERE queue = 'upg_busy' AND outcome = 'completed'
                                   GROUP BY job_id HAVING count(*) <> 1) x",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(twice, 0, "jobs of upg_busy completed other than once");

    // The leases taken before the upgrade work with their tokens, on the worker's old session.
    for j in &pop.held {
        let r = w
            .query_one("SELECT lease_expires_at IS NOT NULL, cancel_requested FROM jq.heartbeat($1, $2)", &[&j.id, &j.token])
            .expect("heartbeat after the upgrade");
        assert!(r.get::<_, bool>(0), "heartbeat of job {} refused after the upgrade", j.id);
    }
    for j in &pop.held[..3] {
        assert!(complete(&mut w, j), "complete of job {} refused after the upgrade", j.id);
    }
    let st: String = w
        .query_one("SELECT jq.fail($1, $2, 'after upgrade')::text", &[&pop.held[3].id, &pop.held[3].token])
        .unwrap()
        .get(0);
    assert_eq!(st, "scheduled");
    let released: bool =
        w.query_one("SELECT jq.release($1, $2)", &[&pop.held[4].id, &pop.held[4].token]).unwrap().get(0);
    assert!(released);
    let outcomes: Vec<String> = c
        .query(
            "SELECT outcome::text FROM jq.executions WHERE job_id = ANY ($1) AND worker = 'w-held' ORDER BY job_id, seq",
            &[&pop.held.iter().map(|j| j.id).collect::<Vec<_>>()],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(outcomes, ["completed", "completed", "completed", "failed", "released"]);
    // The key slot held by the keyed head passes to the next job of the key.
    assert!(complete(&mut w, &pop.keyed_head));
    let next = claim(&mut w, "pop_keyed", "w-after", 5, None);
    assert_eq!(next.len(), 1, "the next job of key k is claimable once the head completed");
    assert!(complete(&mut w, &next[0]));
    // New claims and enqueues work.
    let id: i64 = c.query_one("SELECT jq.enqueue('pop_work', '{\"new\": true}')", &[]).unwrap().get(0);
    let fresh = claim(&mut w, "pop_work", "w-after", 100, None);
    assert!(fresh.iter().any(|j| j.id == id), "a job enqueued after the upgrade is claimable");
    for j in &fresh {
        assert!(complete(&mut w, j));
    }
    let retried: bool = c.query_one("SELECT jq.retry($1)", &[&pop.dead]).unwrap().get(0);
    assert!(retried, "jq.retry of the dead job");
    assert_eq!(jq_pg_test::state(&mut c, pop.cancelled).as_deref(), Some("cancelled"));
    // Cron fires the next minute, once.
    let fired: i32 = c.query_one("SELECT jq.cron_tick(to_timestamp($1::bigint))", &[&pop.next_fire]).unwrap().get(0);
    assert_eq!(fired, 1, "cron_tick after the upgrade");
    let fired: i32 = c.query_one("SELECT jq.cron_tick(to_timestamp($1::bigint))", &[&pop.next_fire]).unwrap().get(0);
    assert_eq!(fired, 0, "the same fire time again");
    let runs: i64 = c.query_one("SELECT count(*) FROM jq.cron_runs WHERE schedule = 'pop_minute'", &[]).unwrap().get(0);
    assert_eq!(runs, 2);
    // queue_stats reads every queue.
    let stats: Vec<(String, i64, i64)> = c
        .query("SELECT queue, completed, dead FROM jq.queue_stats ORDER BY queue", &[])
        .expect("jq.queue_stats after the upgrade")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let names: Vec<&str> = stats.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(names, ["pop_cron", "pop_keyed", "pop_once", "pop_paused", "pop_rate", "pop_work", "upg_busy"]);
    assert_eq!(stats.iter().find(|s| s.0 == "upg_busy").unwrap().1, total as i64);

    // And the catalog is that of a fresh install.
    let fresh_db = TestDb::fresh("upg_pop_fresh");
    let (text, counted) =
        fingerprint::diff("fresh", &fingerprint::catalog(&mut fresh_db.connect()), "upgraded", &fingerprint::catalog(&mut c));
    assert_eq!(counted, 0, "the populated upgraded install differs from a fresh one:\n{text}");
}

/// 0.1.0 told DBAs to give their roles privileges on jq's tables; the upgrade to 0.2.0 takes them
/// back (tables change only through the functions, payloads are per queue) and says so with a
/// WARNING per role and table (a NOTICE would not reach the DBA: PostgreSQL raises
/// client_min_messages to WARNING while it runs an extension script). Negative control
/// `JQ_TEST_BREAK=upgrade_keeps_old_grants` (the old_app grant made again after the update, as
/// if the script had left it): seen failing with "old_app still reads or writes jq.jobs".
#[test]
fn the_upgrade_takes_back_table_privileges_that_0_1_0_setups_granted() {
    let db = TestDb::with_setup("upg_acl", &format!("CREATE EXTENSION jq VERSION '{OLDEST_RELEASE}'"));
    let role = format!("jqt_upg_acl_{}", std::process::id());
    let mut a = jq_pg_test::admin();
    a.batch_execute(&format!("DROP ROLE IF EXISTS {role}; CREATE ROLE {role}")).unwrap();
    let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = warnings.clone();
    let mut config: postgres::Config = jq_pg_test::conninfo(&db.name).parse().unwrap();
    config.notice_callback(move |n| seen.lock().unwrap().push(format!("{}: {}", n.severity(), n.message())));
    let mut c = config.connect(postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "GRANT USAGE ON SCHEMA jq TO {role};
         GRANT SELECT, INSERT, UPDATE, DELETE ON jq.jobs TO {role};
         GRANT USAGE ON SEQUENCE jq.jobs_id_seq TO {role};
         ALTER EXTENSION jq UPDATE;"
    ))
    .unwrap();
    if jq_pg_test::broken("upgrade_keeps_old_grants") {
        c.batch_execute(&format!("GRANT UPDATE ON jq.jobs TO {role}")).unwrap();
    }
    let can: Vec<bool> = c
        .query_one(
            "SELECT has_table_privilege($1, 'jq.jobs', 'SELECT'), has_table_privilege($1, 'jq.jobs', 'UPDATE'),
                    has_sequence_privilege($1, 'jq.jobs_id_seq', 'USAGE')",
            &[&role],
        )
        .map(|r| vec![r.get(0), r.get(1), r.get(2)])
        .unwrap();
    assert_eq!(can, vec![false, false, false], "old_app still reads or writes jq.jobs: {can:?}");
    let said = warnings.lock().unwrap().clone();
    assert!(
        said.iter().any(|w| w.starts_with("WARNING") && w.contains(&role) && w.contains("jq.jobs")),
        "no WARNING named the role: {said:?}"
    );
    drop(c);
    drop(db);
    let _ = a.batch_execute(&format!("DROP ROLE IF EXISTS {role}"));
}

/// The upgrade replaces the functions and views it does not need to drop in place (CREATE OR
/// REPLACE), so what a DBA built on them stays: a direct `GRANT EXECUTE` on `jq.status()`, a
/// view over `jq.table_health` and a column default calling `jq.max_payload_bytes()` all work
/// after `ALTER EXTENSION jq UPDATE` from the oldest release. Seen failing against an upgrade
/// script that dropped every function and view of the installed version first: the update
/// stopped with 2BP01 (view public.health depends on view table_health), and without the view
/// and the default it went through but the role had lost EXECUTE on jq.status().
#[test]
fn objects_and_grants_on_what_the_upgrade_keeps_survive_it() {
    let db = TestDb::with_setup("upg_keep", &format!("CREATE EXTENSION jq VERSION '{OLDEST_RELEASE}'"));
    let role = format!("jqt_upg_keep_{}", std::process::id());
    let mut a = jq_pg_test::admin();
    a.batch_execute(&format!("DROP ROLE IF EXISTS {role}; CREATE ROLE {role}")).unwrap();
    let mut c = db.connect();
    c.batch_execute(&format!(
        "GRANT USAGE ON SCHEMA jq TO {role};
         GRANT EXECUTE ON FUNCTION jq.status() TO {role};
         CREATE VIEW public.health AS SELECT * FROM jq.table_health;
         CREATE TABLE public.uploads (id int, max_bytes int DEFAULT jq.max_payload_bytes());
         ALTER EXTENSION jq UPDATE;"
    ))
    .expect("the update with objects of the DBA's on jq's functions and views");
    let kept: bool = c
        .query_one("SELECT has_function_privilege($1, 'jq.status()', 'EXECUTE')", &[&role])
        .unwrap()
        .get(0);
    assert!(kept, "{role} lost EXECUTE on jq.status() in the upgrade");
    c.batch_execute("SELECT count(*) FROM public.health").expect("the view over jq.table_health");
    let max: Option<i32> = c.query_one("INSERT INTO public.uploads (id) VALUES (1) RETURNING max_bytes", &[]).unwrap().get(0);
    assert!(max.is_some_and(|m| m > 0), "the default calling jq.max_payload_bytes() gave {max:?}");
    drop(c);
    drop(db);
    let _ = a.batch_execute(&format!("DROP ROLE IF EXISTS {role}"));
}
