//! Hooks and policies against a hostile or unlucky user: a hook that ignores its cancel, a hook
//! that plants a temporary type for a superuser session to use, a wall timeout in days claimed
//! in a time zone with a daylight-saving change.

use std::time::Duration;

use jq_pg_test::waiting::wait_until;
use jq_pg_test::{broken, claim, executions, sabotage, Client, TestDb};

const CALL_HOOK: &str = "jq._call_hook(jq.jobs,text,regrole,regrole)";
const ALTER_KIND: &str = "jq.alter_kind(text,text,integer,jq.backoff_policy,interval,interval,jq.jitter_mode,interval,regprocedure,text[],bigint)";

/// A login-less member of jq_admin with a schema of its own, dropped (with what it owns) on drop.
struct Admin {
    name: String,
    conninfo: String,
}

impl Drop for Admin {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.conninfo, jq_pg_test::NoTls) {
            let _ = c.batch_execute(&format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND backend_type = 'jq maintenance';
                 DROP OWNED BY {0}; DROP ROLE {0}",
                self.name
            ));
        }
    }
}

use super::{one, past_lease, reap_at};

/// Stops a stuck maintenance worker of this test's database on drop: the hook below survives
/// its cancel, so only drop_kind plus a termination frees the worker (and the database).
struct Unstick {
    conninfo: String,
}

impl Drop for Unstick {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.conninfo, jq_pg_test::NoTls) {
            let _ = c.batch_execute(
                "SELECT jq.drop_kind('q', 'k');
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND backend_type = 'jq maintenance'",
            );
        }
    }
}

// A PL/pgSQL hook can catch query_canceled (WHEN OTHERS does not, an explicit handler does) and
// go on sleeping: jq.hook_timeout's cancel alone would then hold the maintenance worker for
// good. The second timer of src/hook_timer.rs ends the worker's session (FATAL cannot be
// caught); the launcher starts a new one, the hook's attempt was counted before the call, and
// the next pass reaps b. Negative control: JQ_TEST_BREAK=hook_no_timer (no timer armed) made
// this test fail: b's expired lease was never reaped.
#[test]
fn a_hook_that_swallows_its_cancel_does_not_hold_up_maintenance() {
    let db = TestDb::new("bgw_hook_swallow");
    let mut c = db.connect();
    let _unstick = Unstick { conninfo: db.conninfo() };
    if broken("hook_no_timer") {
        sabotage(&mut c, CALL_HOOK, "PERFORM jq._hook_timer_start();", "", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('q', max_attempts => 1, max_lease_expiries => 0);
         SELECT jq.create_queue('r');
         CREATE FUNCTION public.stubborn(job jq.jobs) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
             SET search_path = public, pg_temp AS $$
             BEGIN
                 LOOP
                     BEGIN
                         PERFORM pg_catalog.pg_sleep(600);
                     EXCEPTION WHEN query_canceled THEN
                         NULL;  -- jq.hook_timeout's cancel, taken and ignored
                     END;
                 END LOOP;
             END $$;
         SELECT jq.alter_kind('q', 'k', on_dead => 'public.stubborn(jq.jobs)')",
    )
    .unwrap();
    one::<i64>(&mut c, "SELECT jq.enqueue('q', kind => 'k')");
    let mut w = db.connect();
    claim(&mut w, "q", "w", 1, Some("1 second")).pop().expect("claim a");
    // The reaper takes a's expired lease (and calls its hook) from about 1 s on; then a lease of
    // queue r expires.
    let b: i64 = one(&mut c, "SELECT jq.enqueue('r')");
    claim(&mut w, "r", "w", 1, Some("2 seconds")).pop().expect("claim b");
    let state = |c: &mut Client, id: i64| one::<String>(c, &format!("SELECT state::text FROM jq.jobs WHERE id = {id}"));
    // jq.hook_timeout (3 s), the termination at 7 s, a new worker within about a second, and a
    // generous margin.
    wait_until(Duration::from_secs(40), "the reaper takes back b's expired lease", || state(&mut c, b) == "ready");
}

// A wall timeout with a day (or month) field, added to started_at, depends on the time zone of
// whoever adds it: the claim caps the lease at started_at + timeout in the worker session's
// TimeZone, the reaper tests jq._overdue in the server's; across a daylight-saving change they
// differ by an hour, and an attempt that ran into its timeout would be taken for a vanished
// worker (refunded as an expired lease, never charged). jq.alter_kind stores the timeout as a
// length of time (days as 24 hours). Negative control: JQ_TEST_BREAK=timeout_keeps_days (the
// timeout stored as given) made this test fail: state ready, outcome lease_expired.
#[test]
fn a_timeout_in_days_is_a_timeout_whatever_the_time_zone_of_the_claim() {
    let db = TestDb::new("kind_timeout_tz");
    let mut c = db.connect();
    if broken("timeout_keeps_days") {
        sabotage(&mut c, ALTER_KIND,
                 "alter_kind.timeout := pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', alter_kind.timeout));", "", 1);
    }
    c.batch_execute(
        "SELECT jq.create_queue('q', lease => '4 days');
         SELECT jq.alter_kind('q', 'daily', max_attempts => 1, timeout => '3 days')",
    )
    .unwrap();
    let id: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'daily')");
    // A worker session whose zone starts daylight-saving time tomorrow at midnight (Julian day,
    // no leap day: so within 1 to 2 days, inside the 3-day timeout).
    let mut w = db.connect();
    let tz: String = one(
        &mut w,
        "SELECT pg_catalog.format('STD0DST-1,J%s/0,J%s/0', d, (d + 99) % 365 + 1)
         FROM (SELECT (extract(doy FROM now() + interval '1 day')::int - 1) % 365 + 1 AS d) s",
    );
    w.batch_execute(&format!("SET TimeZone = '{tz}'")).unwrap();
    claim(&mut w, "q", "w", 1, None).pop().expect("claim");
    // The worker held its lease to the end: the lease is at the wall timeout.
    c.batch_execute("SET TimeZone = 'UTC'").unwrap();
    let at = past_lease(&mut c, id);
    assert_eq!(reap_at(&mut c, &at), 1, "not ended");
    let (state, error): (String, String) = {
        let r = c.query_one(&format!("SELECT state::text, coalesce(last_error, '') FROM jq.jobs WHERE id = {id}"), &[]).unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(
        (state.as_str(), executions(&mut c, id).last().unwrap().2.as_str()),
        ("dead", "failed"),
        "an attempt that reached its 3-day timeout was refunded as an expired lease (error {error:?})"
    );
}

// A hook may not leave temporary objects behind: pg_temp is searched first for type names, so a
// temporary domain pg_temp.float8 made by a hook the maintenance worker called (a superuser
// session) would be what the maintenance functions' `::float8` means from then on, its CHECK
// run as the superuser (a pg_temp.text would make the worker take jq for uninstalled). The
// objects of the temporary schema are compared around each call (jq._session_objects); a hook
// that leaves one is rolled back as failed (42501). Negative control:
// JQ_TEST_BREAK=hook_keeps_temp_objects (the comparison removed) made this test fail: the
// jq_admin became a superuser at the next wall timeout.
#[test]
fn a_hook_cannot_plant_a_type_that_maintenance_then_runs_as_superuser() {
    let db = TestDb::new("bgw_hook_temp_type");
    let mut c = db.connect();
    if broken("hook_keeps_temp_objects") {
        sabotage(&mut c, CALL_HOOK, "IF NOT jq._same_text(jq._session_objects(), v_objects) THEN", "IF false THEN", 1);
    }
    let name = format!("jqt_temp_type_{}", std::process::id());
    let _admin = Admin { name: name.clone(), conninfo: db.conninfo() };
    c.batch_execute(&format!(
        "DROP ROLE IF EXISTS {name}; CREATE ROLE {name} IN ROLE jq_admin;
         CREATE SCHEMA app AUTHORIZATION {name};
         SET ROLE {name};
         CREATE FUNCTION app.escalate(v pg_catalog.float8) RETURNS boolean LANGUAGE plpgsql AS $$
         BEGIN
             IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user) THEN
                 EXECUTE 'ALTER ROLE {name} SUPERUSER';
             END IF;
             RETURN true;
         EXCEPTION WHEN OTHERS THEN RETURN true;
         END $$;
         GRANT USAGE ON SCHEMA app TO PUBLIC;
         CREATE FUNCTION app.plant(job jq.jobs) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
             SET search_path = app, pg_catalog AS $$
         BEGIN
             EXECUTE 'CREATE DOMAIN pg_temp.float8 AS pg_catalog.float8 CHECK (app.escalate(VALUE))';
         EXCEPTION WHEN duplicate_object THEN NULL;
         END $$;
         SELECT jq.create_queue('q');
         SELECT jq.alter_kind('q', 'plant', max_attempts => 1, timeout => '1 second', on_dead => 'app.plant(jq.jobs)');
         SELECT jq.alter_kind('q', 'later', max_attempts => 5, timeout => '4 seconds');
         RESET ROLE;"
    ))
    .unwrap();
    let planted: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'plant')");
    let later: i64 = one(&mut c, "SELECT jq.enqueue('q', kind => 'later')");
    let mut w = db.connect();
    assert_eq!(claim(&mut w, "q", "w", 2, Some("1 minute")).len(), 2);
    let attempt_ended = |c: &mut Client, id: i64| {
        one::<bool>(c, &format!("SELECT state::text <> 'running' FROM jq.jobs WHERE id = {id}"))
    };
    wait_until(Duration::from_secs(30), "the reaper times out the planting job", || attempt_ended(&mut c, planted));
    wait_until(Duration::from_secs(30), "the reaper times out the later job", || attempt_ended(&mut c, later));
    let superuser: bool = one(&mut c, &format!("SELECT rolsuper FROM pg_roles WHERE rolname = '{name}'"));
    assert!(!superuser, "a non-superuser jq_admin became superuser through its on_dead hook");
}
