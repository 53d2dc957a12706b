//! The worker fleet registry (sql/fleet.sql): registration, beats, deregistration, who may do
//! each, bad input, and who sees which worker in jq.fleet. Pruning by the background worker:
//! tests/bgworker/fleet.rs; a real `jqctl work` in the fleet: worker-client/tests/fleet.rs.
//!
//! Negative controls (each seen failing; run with `JQ_TEST_BREAK=<name>`):
//! - `fleet_beat_unfenced`: jq.worker_beat without its fence on the registering role: another
//!   role's beat rewrites the worker's row; `beats_and_deregistration_count_only_from_the_registering_role` fails.
//! - `fleet_no_sample_cap`: jq.worker_beat keeps every sample: the row's CHECK (at most 60)
//!   refuses the 61st beat; `beats_record_counts_and_keep_the_last_60_samples` fails.
//! - `fleet_never_stale`: jq.worker_state never says stale;
//!   `a_worker_without_beats_for_three_intervals_is_stale` fails.
//! - `fleet_view_unfiltered`: jq.fleet without its grant filter; `a_role_sees_only_the_workers_of_its_queues` fails.

use jq_pg_test::{broken, sabotage, sqlstate, Client, TestDb};

/// Cluster-wide roles made for one test, dropped after its database.
struct Roles(Vec<String>);

impl Roles {
    fn new(c: &mut Client, tag: &str, shorts: &[&str]) -> Roles {
        let names: Vec<String> = shorts.iter().map(|s| format!("jqt_{tag}_{}_{s}", std::process::id())).collect();
        for n in &names {
            c.batch_execute(&format!("DROP ROLE IF EXISTS {n}; CREATE ROLE {n} LOGIN")).unwrap();
        }
        Roles(names)
    }

    fn get(&self, short: &str) -> &str {
        self.0.iter().find(|n| n.ends_with(&format!("_{short}"))).expect("role")
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        let mut a = jq_pg_test::admin();
        for n in &self.0 {
            let _ = a.batch_execute(&format!("DROP ROLE IF EXISTS {n}"));
        }
    }
}

/// Runs `sql` as `role` (SET ROLE for this one statement's transaction); the first column of
/// its one row as text, or the SQLSTATE.
fn as_role(c: &mut Client, role: &str, sql: &str) -> Result<Option<String>, String> {
    let mut t = c.transaction().unwrap();
    t.batch_execute(&format!("SET LOCAL ROLE {role}")).unwrap();
    let r = t.query_one(&format!("SELECT ({sql})::text"), &[]);
    match r {
        Ok(row) => {
            t.commit().unwrap();
            Ok(row.get(0))
        }
        Err(e) => Err(e.code().map(|c| c.code().to_string()).unwrap_or_else(|| e.to_string())),
    }
}

/// The whole jq.workers row as JSON text, to compare before and after a call that must change nothing.
fn worker_row(c: &mut Client, id: &str) -> String {
    c.query_one("SELECT to_jsonb(w)::text FROM jq.workers w WHERE worker_id = $1::text::uuid", &[&id]).unwrap().get(0)
}

fn count_workers(c: &mut Client) -> i64 {
    c.query_one("SELECT count(*) FROM jq.workers", &[]).unwrap().get(0)
}

#[test]
fn beats_record_counts_and_keep_the_last_60_samples() {
    let db = TestDb::new("fleet_beats");
    let mut c = db.connect();
    if broken("fleet_no_sample_cap") {
        sabotage(&mut c, "jq.worker_beat(uuid,integer,bigint,bigint)",
                 "pg_catalog.jsonb_array_length(w.samples) >= 60", "false", 1);
    }
    c.batch_execute("SELECT jq.create_queue('a'); SELECT jq.create_queue('b');").unwrap();
    let id: String = c
        .query_one("SELECT jq.register_worker('host-1:42', 'host-1', 42, '0.1.0', ARRAY['b', 'a', 'b'], 8)::text", &[])
        .unwrap()
        .get(0);
    let row = c
        .query_one(
            "SELECT name, hostname, pid, client_version, jq_version = (SELECT extversion FROM pg_extension WHERE extname = 'jq'),
                    queues, concurrency, in_flight, rss_bytes, state, samples::text, stopped_at IS NULL,
                    started_at = last_beat_at
               FROM jq.fleet WHERE worker_id = $1::text::uuid",
            &[&id],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "host-1:42");
    assert_eq!(row.get::<_, String>(1), "host-1");
    assert_eq!(row.get::<_, i32>(2), 42);
    assert_eq!(row.get::<_, Option<String>>(3).as_deref(), Some("0.1.0"));
    assert!(row.get::<_, bool>(4), "jq_version is the extension's");
    assert_eq!(row.get::<_, Vec<String>>(5), vec!["a", "b"], "queues sorted, without duplicates");
    assert_eq!((row.get::<_, i32>(6), row.get::<_, i32>(7), row.get::<_, i64>(8)), (8, 0, 0));
    assert_eq!(row.get::<_, String>(9), "active");
    assert_eq!(row.get::<_, String>(10), "[]");
    assert!(row.get::<_, bool>(11) && row.get::<_, bool>(12));

    for n in 1..=65 {
        let ok: bool = c
            .query_one("SELECT jq.worker_beat($1::text::uuid, $2, $3)", &[&id, &(n % 9), &(n as i64 * 1000)])
            .unwrap()
            .get(0);
        assert!(ok, "beat {n}");
    }
    let row = c
        .query_one(
            "SELECT in_flight, rss_bytes, jsonb_array_length(samples), samples -> 0 ->> 'rss', samples -> -1 ->> 'rss',
                    samples -> -1 ->> 'running', (samples -> -1 ->> 'at')::bigint = floor(extract(epoch FROM last_beat_at))::bigint
               FROM jq.workers WHERE worker_id = $1::text::uuid",
            &[&id],
        )
        .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i64>(1)), (65 % 9, 65_000));
    assert_eq!(row.get::<_, i32>(2), 60, "the last 60 samples");
    assert_eq!(row.get::<_, String>(3), "6000", "oldest kept: beat 6");
    assert_eq!(row.get::<_, String>(4), "65000", "newest last");
    assert_eq!(row.get::<_, String>(5), (65 % 9).to_string());
    assert!(row.get::<_, bool>(6), "at: epoch seconds of the beat");

    // Deregistration: stopped, then beats and a second deregistration are refused.
    let r: (bool, bool, bool) = {
        let row = c
            .query_one(
                "SELECT jq.deregister_worker($1::text::uuid), jq.deregister_worker($1::text::uuid),
                        jq.worker_beat($1::text::uuid, 1, 1)",
                &[&id],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!(r, (true, false, false));
    let row = c.query_one("SELECT state, in_flight FROM jq.fleet WHERE worker_id = $1::text::uuid", &[&id]).unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, i32>(1)), ("stopped".to_string(), 0));
    // An unknown (pruned) worker's beat is false: the client registers again.
    let ok: bool = c.query_one("SELECT jq.worker_beat(gen_random_uuid(), 1, 1)", &[]).unwrap().get(0);
    assert!(!ok);
}

#[test]
fn a_worker_without_beats_for_three_intervals_is_stale() {
    let db = TestDb::new("fleet_stale");
    let mut c = db.connect();
    if broken("fleet_never_stale") {
        sabotage(&mut c, "jq.worker_state(timestamptz,timestamptz)", "THEN 'stale'", "THEN 'active'", 1);
    }
    c.batch_execute("SELECT jq.create_queue('a')").unwrap();
    let id: String =
        c.query_one("SELECT jq.register_worker('w', 'h', 1, NULL, ARRAY['a'], 1)::text", &[]).unwrap().get(0);
    let state = |c: &mut Client, interval: &str| -> String {
        let mut t = c.transaction().unwrap();
        t.batch_execute(&format!("SET LOCAL jq.worker_beat_interval = '{interval}'")).unwrap();
        t.query_one("SELECT state FROM jq.fleet WHERE worker_id = $1::text::uuid", &[&id]).unwrap().get(0)
    };
    assert_eq!(state(&mut c, "5s"), "active");
    std::thread::sleep(std::time::Duration::from_millis(400));
    // 400 ms without a beat: stale for a 100 ms interval (3 x 100 ms), still active for 5 s.
    assert_eq!(state(&mut c, "100ms"), "stale");
    assert_eq!(state(&mut c, "5s"), "active");
    assert!(c.query_one("SELECT jq.worker_beat($1::text::uuid, 0, 0)", &[&id]).unwrap().get::<_, bool>(0));
    assert_eq!(state(&mut c, "1s"), "active", "a beat makes a stale worker active again");
    let every: String = c.query_one("SELECT jq.worker_beat_interval()::text", &[]).unwrap().get(0);
    assert_eq!(every, "00:00:05");
}

#[test]
fn beats_and_deregistration_count_only_from_the_registering_role() {
    let mut a = jq_pg_test::admin();
    let roles = Roles::new(&mut a, "fleetfence", &["w1", "w2", "adm"]);
    let db = TestDb::new("fleet_fence");
    let mut c = db.connect();
    if broken("fleet_beat_unfenced") {
        sabotage(&mut c, "jq.worker_beat(uuid,integer,bigint,bigint)",
                 "AND (w.registered_by = v_caller OR pg_catalog.pg_has_role(v_caller, 'jq_admin', 'USAGE'))", "", 1);
    }
    c.batch_execute("SELECT jq.create_queue('a')").unwrap();
    for r in ["w1", "w2"] {
        c.execute("SELECT jq.grant('a', $1::text::regrole, 'work')", &[&roles.get(r)]).unwrap();
    }
    a.batch_execute(&format!("GRANT jq_admin TO {}", roles.get("adm"))).unwrap();
    let id = as_role(&mut c, roles.get("w1"), "jq.register_worker('w1', 'h', 7, NULL, ARRAY['a'], 2)")
        .unwrap()
        .unwrap();
    let registered_by: String = c
        .query_one("SELECT registered_by::text FROM jq.workers WHERE worker_id = $1::text::uuid", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(registered_by, roles.get("w1"));
    let before = worker_row(&mut c, &id);
    // Another role with work on the same queue: its beat and deregistration change nothing.
    let beat = format!("jq.worker_beat('{id}', 5, 5)");
    let stop = format!("jq.deregister_worker('{id}')");
    assert_eq!(as_role(&mut c, roles.get("w2"), &beat), Ok(Some("false".into())), "another role's beat");
    assert_eq!(worker_row(&mut c, &id), before, "another role's beat wrote the row");
    assert_eq!(as_role(&mut c, roles.get("w2"), &stop), Ok(Some("false".into())));
    assert_eq!(worker_row(&mut c, &id), before, "another role's deregistration wrote the row");
    // The registering role's own beat counts; a jq_admin member may stop any worker.
    assert_eq!(as_role(&mut c, roles.get("w1"), &beat), Ok(Some("true".into())));
    assert_eq!(as_role(&mut c, roles.get("adm"), &stop), Ok(Some("true".into())));
    let state: String =
        c.query_one("SELECT state FROM jq.fleet WHERE worker_id = $1::text::uuid", &[&id]).unwrap().get(0);
    assert_eq!(state, "stopped");
    drop(c);
    drop(db);
}

#[test]
fn registering_needs_work_on_every_queue_and_bad_input_writes_nothing() {
    let mut a = jq_pg_test::admin();
    let roles = Roles::new(&mut a, "fleetreg", &["wa", "enq"]);
    let db = TestDb::new("fleet_reg");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('a'); SELECT jq.create_queue('b');").unwrap();
    c.execute("SELECT jq.grant('a', $1::text::regrole, 'work')", &[&roles.get("wa")]).unwrap();
    c.execute("SELECT jq.grant('a', $1::text::regrole, 'enqueue')", &[&roles.get("enq")]).unwrap();
    let denied = [
        (roles.get("wa"), "jq.register_worker('w', 'h', 1, NULL, ARRAY['a', 'b'], 1)"),
        (roles.get("wa"), "jq.register_worker('w', 'h', 1, NULL, ARRAY['nosuch'], 1)"),
        // Unknown queue and bad arguments together: the grant is checked first.
        (roles.get("wa"), "jq.register_worker(NULL, 'h', 1, NULL, ARRAY['b'], 1)"),
        (roles.get("enq"), "jq.register_worker('w', 'h', 1, NULL, ARRAY['a'], 1)"),
    ];
    for (role, call) in denied {
        assert_eq!(as_role(&mut c, role, call), Err("42501".into()), "{call} as {role}");
    }
    let bad = [
        ("jq.register_worker(NULL, 'h', 1, NULL, ARRAY['a'], 1)", "22004"),
        ("jq.register_worker('w', NULL, 1, NULL, ARRAY['a'], 1)", "22004"),
        ("jq.register_worker('w', 'h', NULL, NULL, ARRAY['a'], 1)", "22004"),
        ("jq.register_worker('w', 'h', 1, NULL, NULL, 1)", "22004"),
        ("jq.register_worker('w', 'h', 1, NULL, ARRAY['a'], NULL)", "22004"),
        ("jq.register_worker('', 'h', 1, NULL, ARRAY['a'], 1)", "22023"),
        ("jq.register_worker(repeat('n', 201), 'h', 1, NULL, ARRAY['a'], 1)", "22023"),
        ("jq.register_worker('w', '', 1, NULL, ARRAY['a'], 1)", "22023"),
        ("jq.register_worker('w', 'h', 1, '', ARRAY['a'], 1)", "22023"),
        ("jq.register_worker('w', 'h', 0, NULL, ARRAY['a'], 1)", "22023"),
        ("jq.register_worker('w', 'h', 1, NULL, ARRAY['a'], 0)", "22023"),
        ("jq.register_worker('w', 'h', 1, NULL, ARRAY['a'], -4)", "22023"),
        ("jq.register_worker('w', 'h', 1, NULL, '{}', 1)", "22023"),
        ("jq.register_worker('w', 'h', 1, NULL, (SELECT array_agg('a'::text) FROM generate_series(1, 101)), 1)", "22023"),
        ("jq.register_worker('w', 'h', 1, NULL, ARRAY['a', NULL], 1)", "22004"),
        ("jq.register_worker('w', 'h', 1, NULL, ARRAY['a', 'nosuch'], 1)", "42704"),
        ("jq.worker_beat(NULL, 1, 1)", "22004"),
        ("jq.worker_beat(gen_random_uuid(), NULL, 1)", "22004"),
        ("jq.worker_beat(gen_random_uuid(), 1, NULL)", "22004"),
        ("jq.worker_beat(gen_random_uuid(), -1, 1)", "22023"),
        ("jq.worker_beat(gen_random_uuid(), 1, -1)", "22023"),
        ("jq.deregister_worker(NULL)", "22004"),
    ];
    for (call, code) in bad {
        let got = sqlstate(c.query_one(&format!("SELECT {call}"), &[]));
        assert_eq!(got, code, "{call}");
    }
    assert_eq!(count_workers(&mut c), 0, "a refused call wrote a row");
    // The same role registers on the queue it may work.
    let id = as_role(&mut c, roles.get("wa"), "jq.register_worker('w', 'h', 1, NULL, ARRAY['a'], 1)").unwrap();
    assert!(id.is_some());
    assert_eq!(count_workers(&mut c), 1);
    drop(c);
    drop(db);
}

#[test]
fn a_role_sees_only_the_workers_of_its_queues() {
    let mut a = jq_pg_test::admin();
    let roles = Roles::new(&mut a, "fleetsee", &["ra", "rb", "star", "none"]);
    let db = TestDb::new("fleet_see");
    let mut c = db.connect();
    if broken("fleet_view_unfiltered") {
        let def: String = c.query_one("SELECT pg_get_viewdef('jq.fleet'::regclass)", &[]).unwrap().get(0);
        let unfiltered = &def[..def.find("WHERE").expect("the view's filter")];
        c.batch_execute(&format!("CREATE OR REPLACE VIEW jq.fleet WITH (security_barrier) AS {unfiltered}")).unwrap();
    }
    c.batch_execute("SELECT jq.create_queue('qa'); SELECT jq.create_queue('qb');").unwrap();
    c.execute("SELECT jq.grant('qa', $1::text::regrole, 'work')", &[&roles.get("ra")]).unwrap();
    c.execute("SELECT jq.grant('qb', $1::text::regrole, 'enqueue')", &[&roles.get("rb")]).unwrap();
    c.execute("SELECT jq.grant('*', $1::text::regrole, 'work')", &[&roles.get("star")]).unwrap();
    a.batch_execute(&format!("GRANT jq_worker TO {}", roles.get("none"))).unwrap();
    c.batch_execute(
        "SELECT jq.register_worker('on-a', 'h', 1, NULL, ARRAY['qa'], 1);
         SELECT jq.register_worker('on-b', 'h', 2, NULL, ARRAY['qb'], 1);
         SELECT jq.register_worker('on-ab', 'h', 3, NULL, ARRAY['qa', 'qb'], 1);",
    )
    .unwrap();
    let names = |c: &mut Client, role: &str| -> String {
        as_role(c, role, "SELECT coalesce(string_agg(name, ',' ORDER BY name), '') FROM jq.fleet").unwrap().unwrap()
    };
    assert_eq!(names(&mut c, roles.get("ra")), "on-a", "a role with only qa");
    assert_eq!(names(&mut c, roles.get("rb")), "on-b", "a role with only qb (enqueue)");
    assert_eq!(names(&mut c, roles.get("star")), "on-a,on-ab,on-b");
    assert_eq!(names(&mut c, roles.get("none")), "", "a jq_worker member without a queue");
    assert_eq!(names(&mut c, "jq_admin"), "on-a,on-ab,on-b");
    drop(c);
    drop(db);
}
