//! Exhaustion hooks: called in the transaction that moves a job to dead (jq.fail, the reaper's
//! max_lease_expiries, a wall timeout, jq.expire_lease), as their owner; a hook that raises,
//! waits for a lock or hangs leaves the job dead with the error recorded and is retried by
//! maintenance until it succeeds or is cleared; a hanging one never holds up maintenance.

use std::time::{Duration, Instant};

use jq_pg_test::waiting::wait_until;
use jq_pg_test::{broken, claim, sabotage, sqlstate, Client, TestDb};

use super::{fail, one, past_lease, reap_at};

const CALL_HOOK: &str = "jq._call_hook(jq.jobs,text,regrole,regrole)";
const HOOK_PROBLEM: &str = "jq._hook_problem(text,regrole,regrole)";

/// A login-less role of its own, member of jq_admin, dropped (with what it owns) on drop.
struct Role {
    name: String,
    conninfo: String,
}

impl Role {
    fn new(c: &mut Client, db: &TestDb, tag: &str) -> Role {
        let name = format!("jqt_{tag}_{}", std::process::id());
        c.batch_execute(&format!("DROP ROLE IF EXISTS {name}; CREATE ROLE {name} IN ROLE jq_admin;
                                  CREATE SCHEMA app AUTHORIZATION {name}"))
            .unwrap();
        Role { name, conninfo: db.conninfo() }
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.conninfo, jq_pg_test::NoTls) {
            let _ = c.batch_execute(&format!("DROP OWNED BY {0}; DROP ROLE {0}", self.name));
        }
    }
}

fn is_super(c: &mut Client, role: &str) -> bool {
    one(c, &format!("SELECT rolsuper FROM pg_roles WHERE rolname = '{role}'"))
}

// Negative control: JQ_TEST_BREAK=hook_no_recheck (the call no longer checks that the hook is
// still SECURITY DEFINER) made this test fail: the hook, turned SECURITY INVOKER after its
// registration, ran as the superuser that called jq.fail and made the jq_admin a superuser.
#[test]
fn a_hook_runs_as_its_owner_and_a_jq_admin_gains_no_privilege() {
    let db = TestDb::new("hook_privilege");
    let mut c = db.connect();
    if broken("hook_no_recheck") {
        sabotage(&mut c, HOOK_PROBLEM, "IF NOT p.prosecdef THEN", "IF false THEN", 1);
    }
    let role = Role::new(&mut c, &db, "hook_admin");
    let r = &role.name;
    c.batch_execute(&format!(
        "SELECT jq.create_queue('q', max_attempts => 1);
         CREATE TABLE public.secret (x int); INSERT INTO public.secret VALUES (42);
         SET ROLE {r};
         CREATE TABLE app.seen (job_id bigint, by_role text);
         CREATE FUNCTION app.escalate(job jq.jobs) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
             SET search_path = app, pg_temp AS $$
         BEGIN
             INSERT INTO app.seen VALUES (job.id, current_user);
             ALTER ROLE {r} SUPERUSER;
         END $$;
         CREATE FUNCTION app.peek(job jq.jobs) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
             SET search_path = app, pg_temp AS $$
         BEGIN
             INSERT INTO app.seen SELECT job.id, x::text FROM public.secret;
         END $$;
         SELECT jq.alter_kind('q', 'escalate', on_dead => 'app.escalate(jq.jobs)');
         SELECT jq.alter_kind('q', 'peek', on_dead => 'app.peek(jq.jobs)');
         RESET ROLE;"
    ))
    .unwrap();
    // Registration refuses what would run with more than the registrant's privileges.
    c.batch_execute("CREATE FUNCTION public.su_hook(job jq.jobs) RETURNS void LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'")
        .unwrap();
    assert_eq!(sqlstate(c.batch_execute(&format!(
        "SET ROLE {r}; SELECT jq.alter_kind('q', 'x', on_dead => 'public.su_hook(jq.jobs)')"))), "42501",
        "a jq_admin registered a superuser's hook");
    c.batch_execute("RESET ROLE").unwrap();
    // Turned SECURITY INVOKER after its registration, it would run as jq.fail's caller (or
    // jq's owner): the call checks again and does not run it.
    let mut owner = db.connect();
    owner.batch_execute(&format!("SET ROLE {r}; ALTER FUNCTION app.escalate(jq.jobs) SECURITY INVOKER")).unwrap();
    let escalate: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'escalate')");
    let peek: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'peek')");
    // The worker is a superuser: what the hook may do must not depend on who failed the job.
    let mut w = db.connect();
    for j in claim(&mut w, "q", "w", 2, None) {
        assert_eq!(fail(&mut w, &j, "boom").as_deref(), Some("dead"), "job {}", j.id);
    }
    assert!(!is_super(&mut c, r), "the jq_admin became a superuser through its hook");
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM app.seen"), 0, "a hook did what its owner may not");
    let errors: Vec<(i64, String)> = c
        .query("SELECT job_id, last_error FROM jq.pending_hooks ORDER BY job_id", &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(errors[0].0, escalate);
    assert!(errors[0].1.contains("not SECURITY DEFINER"), "{errors:?}");
    assert_eq!(errors[1].0, peek);
    assert!(errors[1].1.starts_with("42501: permission denied for table secret"), "{errors:?}");
    // SECURITY DEFINER again: it runs, as its owner, and ALTER ROLE ... SUPERUSER is refused.
    owner.batch_execute("ALTER FUNCTION app.escalate(jq.jobs) SECURITY DEFINER").unwrap();
    c.batch_execute("SELECT jq._retry_hooks(now() + interval '1 day')").unwrap();
    assert!(!is_super(&mut c, r), "the jq_admin became a superuser through its hook");
    let again: String = one(&mut c, &format!("SELECT last_error FROM jq.pending_hooks WHERE job_id = {escalate}"));
    assert!(again.starts_with("42501: permission denied to alter role") || again.starts_with("42501: must be superuser"),
            "{again}");
    assert_eq!(one::<String>(&mut c, &format!("SELECT state::text || ' ' || last_error FROM jq.jobs WHERE id = {escalate}")),
               "dead boom");
}

// Negative control: JQ_TEST_BREAK=hook_error_aborts (the hook's error is not caught) made this
// test fail: jq.fail raised the hook's error and the job stayed running.
#[test]
fn a_failing_hook_leaves_the_job_dead_and_is_retried_until_it_succeeds_or_is_cleared() {
    let db = TestDb::new("hook_retries");
    let mut c = db.connect();
    if broken("hook_error_aborts") {
        sabotage(&mut c, CALL_HOOK, "    WHEN OTHERS THEN\n        PERFORM jq._hook_timer_stop();", "    WHEN division_by_zero THEN\n        PERFORM jq._hook_timer_stop();", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('q', max_attempts => 1, max_lease_expiries => 0);
         CREATE TABLE public.broken (on_ boolean); INSERT INTO public.broken VALUES (true);
         CREATE TABLE public.domain (job_id bigint PRIMARY KEY, status text);
         CREATE FUNCTION public.mark(job jq.jobs) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
             SET search_path = public, pg_temp AS $$
         BEGIN
             IF (SELECT on_ FROM public.broken) THEN RAISE EXCEPTION 'domain store down'; END IF;
             INSERT INTO public.domain VALUES (job.id, 'scan_failed');
         END $$;
         SELECT jq.alter_kind('q', 'scan', on_dead => 'public.mark(jq.jobs)', timeout => '1 hour')",
    )
    .unwrap();
    let a: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'scan')");
    let b: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'scan')");
    let mut w = db.connect();
    let ja = claim(&mut w, "q", "w", 1, None).pop().expect("claim a");
    assert_eq!(fail(&mut w, &ja, "boom").as_deref(), Some("dead"), "the hook's error reached the worker");
    let jb = claim(&mut w, "q", "w", 1, Some("1 second")).pop().expect("claim b");
    assert_eq!(jb.id, b);
    let at = past_lease(&mut c, b);
    assert_eq!(reap_at(&mut c, &at), 1, "the reaper's pass stopped at the hook");
    assert_eq!(one::<String>(&mut c, &format!("SELECT string_agg(state::text, ' ' ORDER BY id) FROM jq.jobs WHERE id IN ({a}, {b})")),
               "dead dead");
    assert_eq!(one::<i64>(&mut c, "SELECT hooks_pending FROM jq.queue_stats WHERE queue = 'q'"), 2);
    assert!(one::<String>(&mut c, &format!("SELECT last_error FROM jq.pending_hooks WHERE job_id = {a}"))
        .starts_with("P0001: domain store down"));
    // Not due yet: nothing is called; due and still failing: counted and pushed back.
    assert_eq!(one::<i32>(&mut c, "SELECT jq._retry_hooks(now())"), 0);
    assert_eq!(one::<i32>(&mut c, "SELECT jq._retry_hooks(now() + interval '11 seconds')"), 0);
    assert_eq!(one::<i64>(&mut c, "SELECT min(attempts)::int8 FROM jq.pending_hooks"), 2);
    assert!(one::<String>(&mut c, &format!("SELECT last_error FROM jq.pending_hooks WHERE job_id = {b}"))
        .starts_with("P0001: domain store down"), "the reaper called b's hook in its transaction");
    assert!(one::<bool>(&mut c, &format!("SELECT jq.clear_hook({b})")));
    assert!(!one::<bool>(&mut c, &format!("SELECT jq.clear_hook({b})")), "cleared twice");
    // Fixed: the next due call succeeds and writes the domain row.
    c.batch_execute("UPDATE public.broken SET on_ = false").unwrap();
    assert_eq!(one::<i32>(&mut c, "SELECT jq._retry_hooks(now() + interval '1 day')"), 1);
    assert_eq!(one::<String>(&mut c, "SELECT string_agg(job_id || ' ' || status, ',') FROM public.domain"),
               format!("{a} scan_failed"));
    assert_eq!(one::<i64>(&mut c, "SELECT hooks_pending FROM jq.queue_stats WHERE queue = 'q'"), 0);
}

/// A hook waiting for a lock gives up after jq.hook_lock_timeout(): the worker's jq.fail
/// returns dead within a few seconds, the hook's work is rolled back and retried later.
#[test]
fn a_hook_waiting_for_a_lock_does_not_hold_up_the_failing_worker() {
    let db = TestDb::new("hook_lock");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('q', max_attempts => 1);
         CREATE TABLE public.domain (job_id bigint, status text);
         CREATE FUNCTION public.mark(job jq.jobs) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
             SET search_path = public, pg_temp AS $$
         BEGIN
             LOCK TABLE public.domain IN EXCLUSIVE MODE;
             INSERT INTO public.domain VALUES (job.id, 'failed');
         END $$;
         SELECT jq.alter_kind('q', 'k', on_dead => 'public.mark(jq.jobs)')",
    )
    .unwrap();
    let id: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'k')");
    let mut holder = db.connect();
    holder.batch_execute("BEGIN; LOCK TABLE public.domain IN ACCESS EXCLUSIVE MODE").unwrap();
    let mut w = db.connect();
    let j = claim(&mut w, "q", "w", 1, None).pop().expect("claim");
    let start = Instant::now();
    assert_eq!(fail(&mut w, &j, "boom").as_deref(), Some("dead"));
    assert!(start.elapsed() < Duration::from_secs(10), "jq.fail waited {:?} for the hook", start.elapsed());
    holder.batch_execute("ROLLBACK").unwrap();
    assert!(one::<String>(&mut c, &format!("SELECT last_error FROM jq.pending_hooks WHERE job_id = {id}")).starts_with("55P03"));
    assert_eq!(one::<i32>(&mut c, "SELECT jq._retry_hooks(now() + interval '1 day')"), 1);
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM public.domain"), 1);
}

// A SET (or set_config(.., false)) inside a function outlives it, SET clauses notwithstanding:
// a hook that put its owner's schema first in search_path would have the rest of the caller's
// transaction (jq.fail's worker, the maintenance worker) resolve `=` to its owner's operator,
// as whoever called. Negative control: JQ_TEST_BREAK=hook_keeps_settings (the comparison of the
// settings after the hook removed) made this test fail: the hook's SET LOCAL was still in force
// in the worker's transaction (and, before the fix, its search_path outlived it in the session).
#[test]
fn a_hook_that_changes_a_session_setting_is_rolled_back() {
    let db = TestDb::new("hook_settings");
    let mut c = db.connect();
    if broken("hook_keeps_settings") {
        sabotage(&mut c, CALL_HOOK, "IF NOT jq._same_text(jq._session_settings(), v_settings) THEN", "IF false THEN", 1);
    }
    let role = Role::new(&mut c, &db, "hook_settings");
    let r = &role.name;
    c.batch_execute(&format!(
        "SELECT jq.create_queue('q', max_attempts => 1);
         SET ROLE {r};
         CREATE TABLE app.seen (job_id bigint);
         CREATE FUNCTION app.move_path(job jq.jobs) RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $$
         BEGIN
             INSERT INTO app.seen VALUES (job.id);
             PERFORM pg_catalog.set_config('search_path', 'app, pg_catalog', false);
         END $$;
         CREATE FUNCTION app.local_set(job jq.jobs) RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $$
         BEGIN
             INSERT INTO app.seen VALUES (job.id);
             SET LOCAL work_mem = '64kB';
         END $$;
         SELECT jq.alter_kind('q', 'path', on_dead => 'app.move_path(jq.jobs)');
         SELECT jq.alter_kind('q', 'local', on_dead => 'app.local_set(jq.jobs)');
         RESET ROLE;"
    ))
    .unwrap();
    let path: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'path')");
    let local: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'local')");
    let mut w = db.connect();
    let path_before: String = one(&mut w, "SELECT current_setting('search_path')");
    let mem_before: String = one(&mut w, "SELECT current_setting('work_mem')");
    w.batch_execute("BEGIN").unwrap();
    for j in claim(&mut w, "q", "w", 2, None) {
        assert_eq!(fail(&mut w, &j, "boom").as_deref(), Some("dead"), "job {}", j.id);
    }
    // Still inside the worker's transaction: a SET LOCAL would show here.
    assert_eq!(one::<String>(&mut w, "SELECT current_setting('work_mem')"), mem_before, "SET LOCAL of a hook kept");
    w.batch_execute("COMMIT").unwrap();
    assert_eq!(one::<String>(&mut w, "SELECT current_setting('search_path')"), path_before,
               "the hook's search_path outlived it in the worker's session");
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM app.seen"), 0, "the refused hooks' work was kept");
    let errors: Vec<(i64, String)> = c
        .query("SELECT job_id, last_error FROM jq.pending_hooks ORDER BY job_id", &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(errors.iter().map(|e| e.0).collect::<Vec<_>>(), vec![path, local], "{errors:?}");
    for (_, e) in &errors {
        assert!(e.starts_with("42501: the hook changed a setting of the session"), "{errors:?}");
    }
    // The maintenance retry refuses it the same way and its session keeps its settings.
    c.batch_execute("SELECT jq._retry_hooks(now() + interval '1 day')").unwrap();
    assert_eq!(one::<String>(&mut c, "SELECT current_setting('search_path')"), path_before);
    assert_eq!(one::<i64>(&mut c, "SELECT max(attempts)::int8 FROM jq.pending_hooks"), 2);
}

/// A hook that hangs holds up neither the reaper nor any other queue: the background worker's
/// reaper queues it (job a dead at once), the hooks duty calls it in a transaction of its own,
/// jq.hook_timeout (3 s) cancels it, 57014 is recorded and the pass goes on; the next call waits
/// the retry delay.
///
/// Negative controls: JQ_TEST_BREAK=hook_no_timer (jq._call_hook arms no timer) made this test
/// fail: b's expired lease was never reaped (the hooks duty hung in the hook); so did a jq built
/// with the cargo feature `break-hook-timeout` (the same, in src/hook_timer.rs).
#[test]
fn a_hanging_hook_does_not_hold_up_maintenance() {
    let db = TestDb::new("bgw_hook_hang");
    let mut c = db.connect();
    if broken("hook_no_timer") {
        sabotage(&mut c, CALL_HOOK, "PERFORM jq._hook_timer_start();", "", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('q', max_attempts => 1, max_lease_expiries => 0);
         SELECT jq.create_queue('r');
         CREATE FUNCTION public.hang(job jq.jobs) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
             SET search_path = public, pg_temp AS $$ BEGIN PERFORM pg_catalog.pg_sleep(600); END $$;
         SELECT jq.alter_kind('q', 'k', on_dead => 'public.hang(jq.jobs)')",
    )
    .unwrap();
    let a: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'k')");
    let mut w = db.connect();
    claim(&mut w, "q", "w", 1, Some("1 second")).pop().expect("claim a");
    let state = |c: &mut Client, id: i64| one::<String>(c, &format!("SELECT state::text FROM jq.jobs WHERE id = {id}"));
    wait_until(Duration::from_secs(30), "the reaper makes job a dead", || state(&mut c, a) == "dead");
    wait_until(Duration::from_secs(30), "the hooks duty takes a's hook", || {
        one::<i64>(&mut c, &format!("SELECT coalesce(max(attempts), 0)::int8 FROM jq.pending_hooks WHERE job_id = {a}")) >= 1
    });
    // The hook hangs now (or is about to); a lease of queue r expires meanwhile.
    let b: i64 = one(&mut c, "SELECT jq.enqueue('r')");
    claim(&mut w, "r", "w", 1, Some("1 second")).pop().expect("claim b");
    wait_until(Duration::from_secs(30), "the reaper takes back b's expired lease", || state(&mut c, b) == "ready");
    wait_until(Duration::from_secs(30), "the hanging call is cancelled and recorded", || {
        one::<bool>(&mut c, &format!("SELECT coalesce(bool_or(last_error LIKE '57014: %'), false) FROM jq.pending_hooks WHERE job_id = {a}"))
    });
    let (attempts, delay): (i32, f64) = {
        let r = c.query_one("SELECT attempts, extract(epoch FROM next_at - failed_at)::float8 FROM jq.pending_hooks WHERE job_id = $1", &[&a]).unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(attempts, 1, "one call so far");
    assert!(delay > 4.0, "the next call waits its retry delay (10 s from the take), not {delay} s after the timeout");
}
