//! jqctl's listings (`queues`, `stats`, `jobs`, `schedules`, `kinds`, `show`) as real processes:
//! `--json` prints one object per line with every column, typed; the default table fits 100
//! characters per line even with a long payload, error, queue, kind, schedule and worker name;
//! `--wide` shows the rest. And `jqctl kinds` / `jqctl alter-kind`: set, reset, bad input.
//!
//! Controls: `JQ_TEST_JQCTL=<jqctl built before --json>` fails all three tests (unknown
//! argument --json; its `schedules` line is 22 columns wide); `JQ_CLIENT_BREAK=no_fit` (cargo
//! test -p worker-client --features test-breaks --test listings) turns the fit off and fails
//! `default_tables_fit_100_columns_and_wide_shows_every_column`.

mod common;
use common::*;
use serde_json::{json, Value};

/// A 120-character queue name (they may have up to 128).
fn long_queue() -> String {
    let mut q = String::from("q.");
    while q.len() < 120 {
        q.push_str("long_queue_name_");
    }
    q.truncate(120);
    q
}

/// What the fixture made.
struct Fixture {
    queue: String,
    dead: i64,
    running: i64,
    ready: i64,
    payload: Value,
    error: String,
    worker: String,
    kind: String,
    schedule: String,
}

/// Two queues, a dead job with a long payload and a long multi-line error failed by a worker
/// with a long name, a running job with progress, a ready job in the long-named queue, two
/// kinds (one with a hook, one with a long name) and a schedule with a long name.
fn fixture(c: &mut Client) -> Fixture {
    let f = Fixture {
        queue: long_queue(),
        dead: 0,
        running: 0,
        ready: 0,
        payload: json!({"body": format!("line one\nline two {}", "x".repeat(600)), "to": "a@example.com"}),
        error: format!("exit status 1: Traceback (most recent call last):\n  File \"x.py\"\n{}", "boom ".repeat(80)),
        worker: format!("worker-{}", "w".repeat(60)),
        kind: "k".repeat(150),
        schedule: format!("nightly-{}", "s".repeat(100)),
    };
    c.batch_execute(&format!(
        "SELECT jq.create_queue('mail', max_attempts => 1, max_concurrency => 4);
         SELECT jq.create_queue('{q}', lease => '30 seconds');
         CREATE FUNCTION public.mark_failed(job jq.jobs) RETURNS void LANGUAGE sql SECURITY DEFINER AS 'SELECT';
         SELECT jq.alter_kind('mail', 'send', timeout => '90 seconds', on_dead => 'public.mark_failed(jq.jobs)');
         SELECT jq.alter_kind('{q}', '{k}', max_attempts => 7);
         SELECT jq.schedule('{s}', '*/5 * * * *', '{q}', payload => '{{\"report\": true}}', timezone => 'Europe/Amsterdam');",
        q = f.queue,
        k = f.kind,
        s = f.schedule
    ))
    .unwrap();
    let dead: i64 = c.query_one("SELECT jq.enqueue('mail', $1, kind => 'send')", &[&f.payload]).unwrap().get(0);
    let st: String = c
        .query_one("SELECT jq.fail(j.id, j.lease_token, $2)::text FROM jq.claim('mail', $1) j", &[&f.worker, &f.error])
        .unwrap()
        .get(0);
    assert_eq!(st, "dead");
    let running: i64 = c.query_one("SELECT jq.enqueue('mail', '{\"n\": 2}', kind => 'scan')", &[]).unwrap().get(0);
    c.batch_execute(
        "SELECT jq.heartbeat(j.id, j.lease_token, progress => '{\"percent\": 40, \"step\": \"scan\"}') \
         FROM jq.claim('mail', 'w2') j",
    )
    .unwrap();
    let ready: i64 = c.query_one("SELECT jq.enqueue($1, '{}')", &[&f.queue]).unwrap().get(0);
    Fixture { dead, running, ready, ..f }
}

/// `jqctl ARGS`, which must succeed; its stdout.
fn run(db: &TestDb, args: &[&str]) -> String {
    let out = db.jqctl().args(args).output().unwrap();
    assert!(out.status.success(), "jqctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `jqctl ARGS --json`: each line parsed on its own.
fn json_lines(db: &TestDb, args: &[&str]) -> Vec<Value> {
    let text = run(db, &[args, &["--json"]].concat());
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("jqctl {args:?}: {e} in line {l:?}")))
        .collect()
}

/// The row whose `key` is `value`.
fn row<'a>(rows: &'a [Value], key: &str, value: &Value) -> &'a Value {
    rows.iter().find(|r| &r[key] == value).unwrap_or_else(|| panic!("no row with {key} = {value} in {rows:?}"))
}

/// Asserts the object's keys are exactly `keys`.
fn assert_keys(v: &Value, keys: &[&str]) {
    let mut got: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut want = keys.to_vec();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "keys of {v}");
}

/// `YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)`, RFC 3339.
fn is_rfc3339(v: &Value) -> bool {
    let Some(s) = v.as_str() else { return false };
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r).is_some_and(|x| x.iter().all(u8::is_ascii_digit));
    if b.len() < 20 || !(digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10)) {
        return false;
    }
    if !(b[10] == b'T' && digits(11..13) && b[13] == b':' && digits(14..16) && b[16] == b':' && digits(17..19)) {
        return false;
    }
    let mut i = 19;
    if b[i] == b'.' {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    let zone = &s[i..];
    zone == "Z" || (zone.len() == 6 && (zone.starts_with('+') || zone.starts_with('-')) && &zone[3..4] == ":")
}

const JOB_KEYS: &[&str] = &[
    "id", "queue", "kind", "state", "attempt", "max_attempts", "priority", "run_at", "created_at", "started_at",
    "finished_at", "worker", "lease_expires_at", "lease", "lease_token", "lease_expiries", "claims",
    "cancel_requested", "idempotency_key", "concurrency_key", "timeout", "base_priority", "next_age_at",
    "last_error", "progress", "payload", "result",
];

#[test]
fn every_listing_prints_typed_json_lines() {
    let db = TestDb::new("listings_json");
    let mut c = db.connect();
    let f = fixture(&mut c);

    let queues = json_lines(&db, &["queues"]);
    assert_eq!(queues.len(), 2);
    let mail = row(&queues, "name", &json!("mail"));
    assert_keys(mail, &[
        "name", "paused", "max_concurrency", "max_attempts", "lease", "backoff", "backoff_base", "backoff_max",
        "jitter", "max_lease_expiries", "max_lease", "retention", "dead_retention", "history_retention",
        "key_concurrency", "rate_limit", "rate_period", "rate_burst", "priority_aging", "has_kinds", "created_at",
    ]);
    assert_eq!(mail["max_attempts"], json!(1));
    assert_eq!(mail["max_concurrency"], json!(4));
    assert_eq!(mail["lease"], json!(300), "intervals in seconds");
    assert_eq!(mail["retention"], json!(86400));
    assert_eq!(mail["paused"], json!(false));
    assert_eq!(mail["rate_limit"], Value::Null);
    assert_eq!(mail["backoff"], json!("exponential"));
    assert!(is_rfc3339(&mail["created_at"]), "{}", mail["created_at"]);
    assert_eq!(row(&queues, "name", &json!(f.queue))["lease"], json!(30));

    let stats = json_lines(&db, &["stats"]);
    let mail = row(&stats, "queue", &json!("mail"));
    assert_keys(mail, &[
        "queue", "depth", "claimable", "scheduled", "running", "dead", "completed", "cancelled",
        "oldest_claimable_age", "paused", "blocked", "completed_5m", "failed_5m", "failed_15m",
        "lease_expired_15m", "wait_p95_5m", "hooks_pending",
    ]);
    assert_eq!((&mail["depth"], &mail["running"], &mail["dead"], &mail["failed_5m"]), (&json!(0), &json!(1), &json!(1), &json!(1)));
    assert_eq!(mail["oldest_claimable_age"], Value::Null);
    let long = row(&stats, "queue", &json!(f.queue));
    assert_eq!(long["claimable"], json!(1));
    assert!(long["oldest_claimable_age"].as_f64().is_some_and(|s| s >= 0.0), "{long}");

    let jobs = json_lines(&db, &["jobs", "-Q", "mail"]);
    assert_eq!(jobs.iter().map(|j| j["id"].as_i64().unwrap()).collect::<Vec<_>>(), [f.running, f.dead], "newest first");
    let dead = row(&jobs, "id", &json!(f.dead));
    assert_keys(dead, JOB_KEYS);
    assert_eq!(dead["state"], json!("dead"));
    assert_eq!((&dead["attempt"], &dead["max_attempts"]), (&json!(1), &json!(1)));
    assert_eq!(dead["payload"], f.payload, "jsonb as JSON, not a string");
    assert_eq!(dead["last_error"], json!(f.error));
    assert_eq!(dead["worker"], json!(f.worker));
    assert_eq!(dead["timeout"], json!(90), "the kind's timeout, in seconds");
    assert_eq!(dead["progress"], Value::Null);
    assert!(is_rfc3339(&dead["finished_at"]) && is_rfc3339(&dead["run_at"]), "{dead}");
    let running = row(&jobs, "id", &json!(f.running));
    assert_eq!(running["progress"], json!({"percent": 40, "step": "scan"}));
    assert!(running["lease_token"].as_str().is_some_and(|t| t.len() == 36), "{running}");
    assert_eq!(json_lines(&db, &["jobs", "-Q", "mail", "--state", "running"]).len(), 1);
    assert_eq!(json_lines(&db, &["jobs", "-Q", &f.queue])[0]["id"], json!(f.ready));

    let schedules = json_lines(&db, &["schedules"]);
    assert_eq!(schedules.len(), 1);
    let s = &schedules[0];
    assert_keys(s, &[
        "name", "cron", "timezone", "queue", "kind", "payload", "priority", "max_attempts", "misfire", "overlap",
        "enabled", "next_run_at", "next_run_from", "last_fired_at", "last_job_id", "fired_count", "skipped_count",
        "last_error", "last_error_at", "created_at", "updated_at", "created_by",
    ]);
    assert_eq!((&s["name"], &s["queue"], &s["cron"]), (&json!(f.schedule), &json!(f.queue), &json!("*/5 * * * *")));
    assert_eq!((&s["payload"], &s["enabled"], &s["fired_count"]), (&json!({"report": true}), &json!(true), &json!(0)));
    assert_eq!((&s["timezone"], &s["last_fired_at"]), (&json!("Europe/Amsterdam"), &Value::Null));
    assert!(is_rfc3339(&s["next_run_at"]), "{s}");

    let kinds = json_lines(&db, &["kinds"]);
    assert_eq!(kinds.len(), 2);
    let send = row(&kinds, "kind", &json!("send"));
    assert_keys(send, &[
        "queue", "kind", "max_attempts", "backoff", "backoff_base", "backoff_max", "jitter", "timeout", "on_dead",
        "on_dead_owner", "hooks_pending", "from_queue", "updated_at",
    ]);
    assert_eq!((&send["queue"], &send["timeout"], &send["max_attempts"]), (&json!("mail"), &json!(90), &json!(1)));
    assert!(send["on_dead"].as_str().is_some_and(|h| h.contains("mark_failed")), "{send}");
    assert_eq!(send["from_queue"], json!(["max_attempts", "backoff", "backoff_base", "backoff_max", "jitter"]));
    assert_eq!(send["hooks_pending"], json!(0));
    let long = row(&kinds, "kind", &json!(f.kind));
    assert_eq!((&long["queue"], &long["max_attempts"], &long["timeout"]), (&json!(f.queue), &json!(7), &Value::Null));

    let show = json_lines(&db, &["show", &f.dead.to_string()]);
    assert_eq!(show.len(), 1, "one object: the job with its executions");
    let job = &show[0];
    assert_keys(job, &[JOB_KEYS, &["executions"]].concat());
    assert_eq!((&job["id"], &job["payload"]), (&json!(f.dead), &f.payload));
    let ex = job["executions"].as_array().unwrap();
    assert_eq!(ex.len(), 1, "{job}");
    assert_keys(&ex[0], &[
        "job_id", "seq", "attempt", "outcome", "queue", "worker", "started_at", "lease_expires_at", "finished_at", "error",
    ]);
    assert_eq!((&ex[0]["seq"], &ex[0]["attempt"], &ex[0]["outcome"]), (&json!(1), &json!(1), &json!("failed")));
    assert_eq!((&ex[0]["worker"], &ex[0]["error"]), (&json!(f.worker), &json!(f.error)));
    assert!(is_rfc3339(&ex[0]["started_at"]), "{job}");
}

/// Every line of `text` is at most 100 characters.
fn assert_fits(args: &[&str], text: &str) {
    for l in text.lines() {
        assert!(l.chars().count() <= 100, "jqctl {args:?}: a line of {} characters:\n{l}\nin\n{text}", l.chars().count());
    }
}

#[test]
fn default_tables_fit_100_columns_and_wide_shows_every_column() {
    let db = TestDb::new("listings_fit");
    let mut c = db.connect();
    let f = fixture(&mut c);
    let dead = f.dead.to_string();
    let one_line_error = f.error.split_whitespace().collect::<Vec<_>>().join(" ");
    let payload_text: String = c.query_one("SELECT payload::text FROM jq.jobs WHERE id = $1", &[&f.dead]).unwrap().get(0);
    // (arguments, a header only --wide shows, a long text the default cuts and --wide shows whole)
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["queues"], "history_retention", &f.queue),
        (vec!["stats"], "wait_p95_5m", &f.queue),
        (vec!["jobs", "-Q", "mail"], "lease_token", &payload_text),
        (vec!["jobs", "-Q", "mail"], "idempotency_key", &one_line_error),
        (vec!["jobs", "-Q", &f.queue], "lease_token", &f.queue),
        (vec!["schedules"], "skipped_count", &f.schedule),
        (vec!["kinds"], "from_queue", &f.kind),
        (vec!["show", &dead], "lease_expires_at", &payload_text),
        (vec!["show", &dead], "lease_expires_at", &one_line_error),
    ];
    for (args, wide_header, long) in &cases {
        let narrow = run(&db, args);
        assert_fits(args, &narrow);
        assert!(narrow.contains('…'), "jqctl {args:?} cut nothing:\n{narrow}");
        assert!(!narrow.contains(long), "jqctl {args:?} shows the long text whole:\n{narrow}");
        let header = narrow.lines().find(|l| l.contains(" | ")).unwrap();
        assert!(!header.contains(wide_header), "jqctl {args:?}: {wide_header} in the default table:\n{narrow}");
        let wide = run(&db, &[&args[..], &["--wide"]].concat());
        let wide_header_line = wide.lines().find(|l| l.contains(" | ")).unwrap();
        assert!(wide_header_line.contains(wide_header), "jqctl {args:?} --wide has no {wide_header}:\n{wide}");
        assert!(wide.contains(long), "jqctl {args:?} --wide cut {long:?}:\n{wide}");
    }
    // The default tables still show what an operator needs first.
    let jobs = run(&db, &["jobs", "-Q", "mail"]);
    for want in ["dead", "running", "send", "1/1", "{\"step\": \"sc", "exit statu"] {
        assert!(jobs.contains(want), "{want:?} not in\n{jobs}");
    }
    let stats = run(&db, &["stats"]);
    assert!(stats.lines().next().unwrap().contains("oldest_claimable_age"), "{stats}");
    let show = run(&db, &["show", &dead]);
    assert!(show.lines().any(|l| l == "state: dead") && show.contains("failed"), "{show}");
}

/// The rows of jq.kinds, as text: what a refused `alter-kind` must leave as it was.
fn kinds_rows(c: &mut Client) -> Vec<String> {
    c.query("SELECT row_to_json(k)::text FROM jq.kinds k ORDER BY queue, kind", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Besides `JQ_TEST_JQCTL`, seen failing ("changed jq.kinds") with an alter-kind that applied
/// --max-attempts in a call of its own before the others: the refusal must be all or nothing.
#[test]
fn alter_kind_sets_and_resets_a_policy_and_refuses_bad_input_changing_nothing() {
    let db = TestDb::new("listings_kinds");
    let mut c = db.connect();
    c.batch_execute(
        "SELECT jq.create_queue('scan', max_attempts => 5);
         CREATE FUNCTION public.scan_failed(job jq.jobs) RETURNS void LANGUAGE sql SECURITY DEFINER AS 'SELECT';
         CREATE FUNCTION public.not_definer(job jq.jobs) RETURNS void LANGUAGE sql AS 'SELECT';",
    )
    .unwrap();
    assert_eq!(run(&db, &["kinds"]).lines().last(), Some("(0 rows)"));

    let out = run(&db, &["alter-kind", "scan", "virus", "--max-attempts", "3", "--backoff", "fixed", "--backoff-base",
                         "10s", "--timeout", "2min", "--on-dead", "public.scan_failed(jq.jobs)"]);
    assert_eq!(out.trim(), "kind virus of queue scan altered");
    let k = json_lines(&db, &["kinds"]);
    assert_eq!(k.len(), 1);
    assert_eq!((&k[0]["queue"], &k[0]["kind"], &k[0]["max_attempts"]), (&json!("scan"), &json!("virus"), &json!(3)));
    assert_eq!((&k[0]["backoff"], &k[0]["backoff_base"], &k[0]["timeout"]), (&json!("fixed"), &json!(10), &json!(120)));
    assert_eq!(k[0]["from_queue"], json!(["backoff_max", "jitter"]));
    assert!(k[0]["on_dead"].as_str().is_some_and(|h| h.contains("scan_failed")), "{}", k[0]);
    let table = run(&db, &["kinds"]);
    assert!(table.contains("virus") && table.contains("00:02:00") && table.contains("scan_failed"), "{table}");

    // A job enqueued afterwards takes the kind's max_attempts and timeout.
    run(&db, &["enqueue", "scan", "{}", "--kind", "virus"]);
    let job = &json_lines(&db, &["jobs", "-Q", "scan"])[0];
    assert_eq!((&job["max_attempts"], &job["timeout"]), (&json!(3), &json!(120)));

    // Reset: back to the queue's (max_attempts) and to none (timeout, on_dead).
    run(&db, &["alter-kind", "scan", "virus", "--reset", "max_attempts", "--reset", "timeout", "--reset", "on_dead"]);
    let k = &json_lines(&db, &["kinds"])[0];
    assert_eq!((&k["max_attempts"], &k["timeout"], &k["on_dead"]), (&json!(5), &Value::Null, &Value::Null));
    assert_eq!(k["from_queue"], json!(["max_attempts", "backoff_max", "jitter"]));
    assert_eq!(k["backoff"], json!("fixed"), "a reset leaves the other options");

    let before = kinds_rows(&mut c);
    for (args, sqlstate) in [
        (&["scan", "virus", "--max-attempts", "0"][..], "22023"),
        (&["scan", "virus", "--timeout=-5 seconds"], "22023"),
        (&["scan", "virus", "--timeout", "soon"], "22007"),
        (&["scan", "virus", "--backoff", "sometimes"], "22P02"),
        (&["scan", "virus", "--on-dead", "public.no_such(jq.jobs)"], "42883"),
        (&["scan", "virus", "--on-dead", "public.not_definer(jq.jobs)"], "42P13"),
        (&["scan", "virus", "--reset", "colour"], "22023"),
        (&["scan", "virus", "--max-attempts", "2", "--timeout", "0"], "22023"),
        (&["scan", "other", "--max-attempts", "0"], "22023"),
        (&["scan", "", "--max-attempts", "2"], "22023"),
        (&["nope", "virus", "--max-attempts", "2"], "42704"),
    ] {
        let out = db.jqctl().arg("alter-kind").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "alter-kind {args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "alter-kind {args:?}: {err}");
        assert!(err.starts_with("jqctl: error: ") && err.contains(&format!("(SQLSTATE {sqlstate})")), "alter-kind {args:?}: {err}");
        assert!(out.stdout.is_empty(), "alter-kind {args:?}: {}", String::from_utf8_lossy(&out.stdout));
        assert_eq!(kinds_rows(&mut c), before, "alter-kind {args:?} changed jq.kinds");
    }
}
