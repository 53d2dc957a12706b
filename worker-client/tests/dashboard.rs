//! `jqctl dashboard` without a browser: the real process against the test cluster, spoken to
//! over HTTP/1.1 by hand. Routing and the markup contract the browser tests rely on, escaping,
//! 404 for another role's queue and job, CSRF, read-only mode, the token off loopback, the base
//! path, and the actions reaching jq.
//!
//! Negative controls (cargo test -p worker-client --features test-breaks --test dashboard, with
//! JQ_CLIENT_BREAK set): `dashboard_no_csrf` fails posts_need_the_csrf_token_and_a_same_origin;
//! `dashboard_raw_payload` fails pages_follow_the_markup_contract_and_escape_payloads.

mod common;
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A running `jqctl dashboard`; killed on drop.
struct Dashboard {
    child: Child,
    addr: String,
    base: String,
}

impl Dashboard {
    /// Starts `jqctl dashboard --listen 127.0.0.1:0 ARGS` on `url` and waits for its line
    /// `dashboard: http://ADDR/...`.
    fn start_at(url: &str, args: &[&str]) -> Dashboard {
        let mut child = jqctl_with_url(url)
            .args(["dashboard", "--listen", "127.0.0.1:0"])
            .args(args)
            .envs(break_env())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start jqctl dashboard");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("the dashboard prints its URL");
        let url = line.trim().strip_prefix("dashboard: http://").unwrap_or_else(|| panic!("unexpected line {line:?}"));
        let (addr, base) = url.split_once('/').unwrap();
        Dashboard { child, addr: addr.to_string(), base: format!("/{}", base.trim_end_matches('/')).trim_end_matches('/').to_string() }
    }

    fn start(db: &TestDb, args: &[&str]) -> Dashboard {
        Dashboard::start_at(&db.url(), args)
    }

    fn get(&self, path: &str) -> Resp {
        self.request("GET", path, &[], None)
    }

    fn post(&self, path: &str, form: &[(&str, &str)], headers: &[(&str, &str)]) -> Resp {
        let body = form
            .iter()
            .map(|(k, v)| format!("{k}={}", percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC)))
            .collect::<Vec<_>>()
            .join("&");
        self.request("POST", path, headers, Some(body))
    }

    /// One request on a fresh connection (`Connection: close`), read to the end.
    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<String>) -> Resp {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut req = format!("{method} {}{path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", self.base, self.addr);
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(b) = &body {
            req.push_str(&format!("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n", b.len()));
        }
        req.push_str("\r\n");
        req.push_str(body.as_deref().unwrap_or(""));
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
        let mut lines = head.lines();
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string())))
            .collect();
        Resp { status, headers, body: body.to_string() }
    }

    /// The CSRF token of the forms of a page.
    fn csrf(&self, path: &str) -> String {
        let b = self.get(path).body;
        let at = b.find("name=\"csrf\" value=\"").expect("a form with a csrf field") + 19;
        b[at..at + 32].to_string()
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// The job's state ("gone" when it does not exist).
fn st(c: &mut Client, id: i64) -> String {
    state(c, id).unwrap_or_else(|| "gone".into())
}

/// A dead job of `queue` (max_attempts 1, claimed and failed with `error`); its id.
fn dead_job(c: &mut Client, queue: &str, error: &str) -> i64 {
    let id: i64 = c.query_one("SELECT jq.enqueue($1, '{}', max_attempts => 1)", &[&queue]).unwrap().get(0);
    let r = c.query_one("SELECT id, lease_token FROM jq.claim($1, 'test')", &[&queue]).unwrap();
    assert_eq!(r.get::<_, i64>(0), id);
    let s: String = c.query_one("SELECT jq.fail($1, $2, $3)::text", &[&id, &r.get::<_, uuid::Uuid>(1), &error]).unwrap().get(0);
    assert_eq!(s, "dead");
    id
}

#[test]
fn pages_follow_the_markup_contract_and_escape_payloads() {
    let db = TestDb::new("dash_pages");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('web'); SELECT jq.create_queue('other');
                     SELECT jq.schedule('nightly', '0 3 * * *', 'web')").unwrap();
    let id: i64 = c
        .query_one("SELECT jq.enqueue('web', '{\"x\": \"<script>alert(1)</script>\"}')", &[])
        .unwrap()
        .get(0);
    let d = Dashboard::start(&db, &[]);

    let o = d.get("/");
    assert_eq!(o.status, 200, "{}", o.body);
    assert!(o.body.contains("<main data-page=\"overview\">"));
    assert!(o.body.contains("<tr data-queue=\"web\">") && o.body.contains("<tr data-queue=\"other\">"));
    let csp = o.header("content-security-policy").expect("CSP header");
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
    assert!(o.header("server-timing").is_some_and(|v| v.starts_with("app;dur=")));
    assert!(!o.body.contains("<script>") , "no inline script: {}", o.body);

    let q = d.get("/queues/web");
    assert_eq!(q.status, 200);
    assert!(q.body.contains("<main data-page=\"queue\""));
    assert!(q.body.contains(&format!("<tr data-job-id=\"{id}\" data-state=\"ready\">")), "{}", q.body);
    let frag = d.get("/queues/web?fragment=1");
    assert!(frag.body.contains(&format!("data-job-id=\"{id}\"")) && !frag.body.contains("<html"));

    let j = d.get(&format!("/jobs/{id}"));
    assert_eq!(j.status, 200);
    assert!(j.body.contains("<main data-page=\"job\""));
    let pre = &j.body[j.body.find("<pre data-field=\"payload\">").expect("payload pre")..];
    let pre = &pre[..pre.find("</pre>").unwrap()];
    assert!(pre.contains("&#60;script&#62;alert(1)&#60;/script&#62;") || pre.contains("&lt;script&gt;"), "{pre}");
    assert!(!j.body.contains("<script>alert(1)"), "the payload must render as text: {pre}");
    assert!(j.body.contains("data-action=\"cancel\""));

    let s = d.get("/schedules");
    assert_eq!(s.status, 200);
    assert!(s.body.contains("<main data-page=\"schedules\">") && s.body.contains("data-action=\"disable\""));
    let w = d.get("/workers");
    assert_eq!(w.status, 200);
    assert!(w.body.contains("<main data-page=\"workers\">"));

    for path in ["/queues/nope", "/jobs/999999999", "/jobs/abc", "/no/such/page"] {
        let r = d.get(path);
        assert_eq!(r.status, 404, "{path}");
        assert!(r.body.contains("Not found, or not visible to this role."), "{path}: {}", r.body);
    }
    assert_eq!(d.get("/assets/dashboard.js").status, 200);
}

/// The overview raises a signal when a history table past retention is kept from truncation by
/// another session's locks, and names its pid (jq.history_tables()). Seen failing with the
/// signal left out: the overview did not name the table. Waits about 10 s: maintenance spares
/// the table the ring just left for that long.
#[test]
fn the_overview_names_a_session_that_keeps_a_history_table_from_truncation() {
    let db = TestDb::new("dash_hist");
    let mut c = db.connect();
    job_past_retention_in_history(&mut c, "dh");
    await_history_due(&mut c, "jobs_done_0");
    let mut reader = db.connect();
    let pid = hold_history(&mut reader);
    let d = Dashboard::start(&db, &[]);
    let body = d.get("/").body;
    let signal = "table jobs_done_0: past retention, truncation blocked";
    assert!(body.contains(signal), "{signal:?} missing from the overview");
    assert!(body.contains(&format!("by pid {pid}")), "the overview does not name the reader's pid {pid}");
    reader.batch_execute("COMMIT").unwrap();
    assert!(!d.get("/").body.contains(signal), "the signal stays after the reader ended");
}

/// A monitoring role granted jq.table_health but not jq.history_tables() still gets the overview,
/// with table health and without the history signals. Seen failing when the overview called
/// jq.history_tables() whenever table health was readable: 403, "permission denied for function
/// history_tables".
#[test]
fn a_role_that_may_read_table_health_only_gets_the_overview() {
    let db = TestDb::new("dash_monitor");
    let mut c = db.connect();
    let role = format!("dash_monitor_{}", std::process::id());
    c.batch_execute(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN IN ROLE jq_worker;
         GRANT SELECT ON jq.table_health TO {role}; SELECT jq.create_queue('mon');"
    ))
    .unwrap();
    let url = format!("postgresql://{role}@{}:{}/{}", host(), db.port, db.name);
    let o = { Dashboard::start_at(&url, &[]).get("/") };  // the dashboard stops here
    c.batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}")).unwrap();
    assert_eq!(o.status, 200, "{}", o.body);
    assert!(o.body.contains("<table class=\"health\">"), "table health is shown: {}", o.body);
    assert!(!o.body.contains("truncation blocked"), "no history signal without jq.history_tables()");
}

#[test]
fn another_roles_queue_and_job_are_not_found() {
    let db = TestDb::new("dash_roles");
    let mut c = db.connect();
    let role = format!("dash_tenant_{}", std::process::id());
    c.batch_execute(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN;
         SELECT jq.create_queue('mine'); SELECT jq.create_queue('theirs');
         SELECT jq.grant('mine', '{role}', 'admin');"
    ))
    .unwrap();
    let theirs = dead_job(&mut c, "theirs", "secret error of theirs");
    let mine = dead_job(&mut c, "mine", "my error");
    let url = format!("postgresql://{role}@{}:{}/{}", host(), db.port, db.name);
    let d = Dashboard::start_at(&url, &[]);
    let o = d.get("/");
    assert!(o.body.contains("data-queue=\"mine\"") && !o.body.contains("theirs"), "{}", o.body);
    assert_eq!(d.get("/queues/theirs").status, 404);
    assert_eq!(d.get("/queues/theirs?state=dead").status, 404);
    let j = d.get(&format!("/jobs/{theirs}"));
    assert_eq!(j.status, 404);
    assert!(!j.body.contains("secret"));
    assert_eq!(d.get(&format!("/jobs/{mine}")).status, 200);
    // Acting on theirs: jq refuses (42501), shown as 403; nothing changes.
    let csrf = d.csrf(&format!("/jobs/{mine}"));
    let r = d.post(&format!("/jobs/{theirs}/retry"), &[("csrf", &csrf)], &[]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(st(&mut c, theirs), "dead");
    let r = d.post("/queues/theirs/dead/retry", &[("csrf", &csrf)], &[]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(st(&mut c, theirs), "dead");
    // Its own: retried.
    let r = d.post(&format!("/jobs/{mine}/retry"), &[("csrf", &csrf)], &[]);
    assert_eq!(r.status, 303);
    assert_eq!(st(&mut c, mine), "ready");
    drop(d);
    c.batch_execute(&format!("SELECT jq.revoke('mine', '{role}', 'admin')")).unwrap();
    let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {role}"));
}

#[test]
fn posts_need_the_csrf_token_and_a_same_origin() {
    let db = TestDb::new("dash_csrf");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('cq')").unwrap();
    let d = Dashboard::start(&db, &[]);
    let paused = |c: &mut Client| c.query_one("SELECT paused FROM jq.queues WHERE name = 'cq'", &[]).unwrap().get::<_, bool>(0);
    let r = d.post("/queues/cq/pause", &[], &[]);
    assert_eq!(r.status, 403, "no token");
    let r = d.post("/queues/cq/pause", &[("csrf", "0123456789abcdef0123456789abcdef")], &[]);
    assert_eq!(r.status, 403, "wrong token");
    assert!(!paused(&mut c), "a refused POST changes nothing");
    let csrf = d.csrf("/queues/cq");
    let r = d.post("/queues/cq/pause", &[("csrf", &csrf)], &[("Origin", "http://evil.example")]);
    assert_eq!(r.status, 403, "another origin");
    assert!(!paused(&mut c));
    let r = d.post("/queues/cq/pause", &[("csrf", &csrf), ("back", "/queues/cq?state=dead")], &[]);
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/queues/cq?state=dead"));
    assert!(paused(&mut c));
    let r = d.post("/queues/cq/resume", &[("csrf", &csrf)], &[]);
    assert_eq!(r.status, 303);
    assert!(!paused(&mut c));
}

#[test]
fn read_only_renders_no_forms_and_refuses_posts() {
    let db = TestDb::new("dash_ro");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('rq')").unwrap();
    let id = dead_job(&mut c, "rq", "x");
    let d = Dashboard::start(&db, &["--read-only"]);
    for path in ["/", "/queues/rq?state=dead", &format!("/jobs/{id}"), "/schedules"] {
        let b = d.get(path).body;
        assert!(!b.contains("method=\"post\"") && !b.contains("data-action"), "{path}: {b}");
    }
    let r = d.post(&format!("/jobs/{id}/retry"), &[], &[]);
    assert_eq!(r.status, 403);
    assert!(r.body.contains("Read-only"));
    assert_eq!(st(&mut c, id), "dead");
}

#[test]
fn a_token_is_required_off_loopback_and_checked() {
    let db = TestDb::new("dash_token");
    let out = db.jqctl().args(["dashboard", "--listen", "0.0.0.0:0"]).env_remove("JQ_DASHBOARD_TOKEN").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("without an access token"));
    let d = Dashboard::start(&db, &["--token", "s3cret-token"]);
    let r = d.get("/");
    assert_eq!(r.status, 401);
    assert!(r.body.contains("name=\"token\""), "the login form");
    assert_eq!(d.request("GET", "/", &[("Authorization", "Bearer wrong")], None).status, 401);
    assert_eq!(d.request("GET", "/", &[("Authorization", "Bearer s3cret-token")], None).status, 200);
    let csrf = {
        let b = r.body;
        let at = b.find("name=\"csrf\" value=\"").unwrap() + 19;
        b[at..at + 32].to_string()
    };
    let bad = d.post("/login", &[("csrf", &csrf), ("token", "nope")], &[]);
    assert_eq!(bad.status, 401);
    let ok = d.post("/login", &[("csrf", &csrf), ("token", "s3cret-token")], &[]);
    assert_eq!(ok.status, 303);
    let cookie = ok.header("set-cookie").expect("a cookie").to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let pair = cookie.split(';').next().unwrap();
    assert_eq!(d.request("GET", "/", &[("Cookie", pair)], None).status, 200);
}

#[test]
fn bulk_actions_on_dead_jobs_follow_the_filters() {
    let db = TestDb::new("dash_bulk");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('bq')").unwrap();
    let a = dead_job(&mut c, "bq", "SMTP 451 try later");
    let b = dead_job(&mut c, "bq", "no such file");
    let e = dead_job(&mut c, "bq", "no such file either");
    let d = Dashboard::start(&db, &[]);
    let page = d.get("/queues/bq?state=dead&error=smtp");
    assert!(page.body.contains(&format!("data-job-id=\"{a}\"")) && !page.body.contains(&format!("data-job-id=\"{b}\"")));
    assert!(page.body.contains("data-action=\"retry-dead\"") && page.body.contains("data-action=\"cancel-dead\""));
    let csrf = d.csrf("/queues/bq?state=dead");
    let r = d.post("/queues/bq/dead/retry", &[("csrf", &csrf), ("error", "smtp")], &[]);
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!((st(&mut c, a), st(&mut c, b)), ("ready".to_string(), "dead".to_string()));
    let r = d.post("/queues/bq/dead/cancel", &[("csrf", &csrf)], &[]);
    assert_eq!(r.status, 303);
    assert_eq!((st(&mut c, b), st(&mut c, e), st(&mut c, a)),
               ("cancelled".to_string(), "cancelled".to_string(), "ready".to_string()));
}

#[test]
fn keyset_pages_cover_the_listing_once() {
    let db = TestDb::new("dash_paging");
    let mut c = db.connect();
    // Three priorities of 60, 120 and 60 jobs: pages of 50 end inside a priority and cross
    // from one to the next (jq._list_jobs_sql, the ready keyset).
    c.batch_execute("SELECT jq.create_queue('pq');
                     SELECT jq.enqueue_many('pq', (SELECT jsonb_agg(g) FROM generate_series(1, 120) g));
                     SELECT jq.enqueue_many('pq', (SELECT jsonb_agg(jsonb_build_object('payload', g, 'priority',
                                                   CASE WHEN g % 2 = 0 THEN 5 ELSE -3 END)) FROM generate_series(1, 120) g),
                                            specs => true)").unwrap();
    let d = Dashboard::start(&db, &[]);
    let mut seen = Vec::new();
    let mut path = "/queues/pq?state=ready".to_string();
    let started = Instant::now();
    loop {
        assert!(started.elapsed() < Duration::from_secs(60), "paging does not end");
        let b = d.get(&path).body;
        seen.extend(b.match_indices("data-job-id=\"").map(|(i, _)| {
            let rest = &b[i + 13..];
            rest[..rest.find('"').unwrap()].parse::<i64>().unwrap()
        }));
        match b.find("data-next href=\"") {
            Some(i) => {
                let rest = &b[i + 16..];
                path = rest[..rest.find('"').unwrap()].replace("&amp;", "&");
                path = path.strip_prefix(&d.base).unwrap_or(&path).to_string();
            }
            None => break,
        }
    }
    let mut want: Vec<i64> = c.query("SELECT id FROM jq.jobs WHERE queue = 'pq' ORDER BY priority DESC, run_at, id", &[])
        .unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(seen, want, "claim order, each job once");
    want.sort();
    assert_eq!(want.len(), 240);
}

#[test]
fn a_base_path_prefixes_every_link() {
    let db = TestDb::new("dash_base");
    let mut c = db.connect();
    c.batch_execute("SELECT jq.create_queue('pfx')").unwrap();
    let d = Dashboard::start(&db, &["--base-path", "/ops/jq/"]);
    assert_eq!(d.base, "/ops/jq");
    let r = d.get("/");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("href=\"/ops/jq/assets/dashboard.css\"") && r.body.contains("href=\"/ops/jq/queues/pfx\""));
    let outside = Dashboard { child: std::process::Command::new("true").spawn().unwrap(), addr: d.addr.clone(), base: String::new() };
    assert_eq!(outside.get("/queues/pfx").status, 404, "nothing outside the prefix");
    let csrf = d.csrf("/queues/pfx");
    let r = d.post("/queues/pfx/pause", &[("csrf", &csrf)], &[]);
    assert_eq!(r.header("location"), Some("/ops/jq/queues/pfx"));
}

/// Backends of the dashboard (application_name "jqctl dashboard") in `cond`.
fn dashboard_backends(c: &mut Client, cond: &str) -> i64 {
    c.query_one(
        &format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jqctl dashboard' AND {cond}"),
        &[],
    )
    .unwrap()
    .get(0)
}

/// A page whose query waits behind another session's lock fails with 503 (57014) after
/// --query-timeout, and the other pages answer meanwhile: with the single pipelined connection
/// of before, the stuck query had no timeout and every later request queued behind it. A
/// request whose HTTP client goes away mid-query leaves no dashboard connection inside a
/// transaction or waiting (db.rs, Checkout). Negative controls (`--features test-breaks`):
/// JQ_CLIENT_BREAK=dashboard_no_timeout fails the 503 (the page still waits at 30 s);
/// dashboard_keeps_dirty and dashboard_drop_without_cancel fail the wait for the dropped
/// request's statement to end (it waits for the lock as long as it is held).
#[test]
fn a_page_behind_a_lock_fails_after_its_timeout_and_others_answer() {
    let db = TestDb::new("dash_lock");
    let mut c = db.connect();
    let d = Dashboard::start(&db, &["--query-timeout", "15"]);
    assert_eq!(d.get("/schedules").status, 200);
    let mut locker = db.connect();
    locker.batch_execute("BEGIN; LOCK TABLE jq.schedules IN ACCESS EXCLUSIVE MODE").unwrap();
    let (addr, base) = (d.addr.clone(), d.base.clone());
    let t0 = Instant::now();
    let stuck = std::thread::spawn(move || {
        let other = Dashboard { child: std::process::Command::new("true").spawn().unwrap(), addr, base };
        other.get("/schedules")
    });
    wait_until(Duration::from_secs(30), "the schedules page waits for the lock", || {
        dashboard_backends(&mut c, "wait_event_type = 'Lock'") == 1
    });
    let r = d.get("/workers");
    assert_eq!(r.status, 200, "another page answers while one waits: {}", r.body);
    assert!(!stuck.is_finished(), "the stuck page was still waiting when the other answered");
    let r = stuck.join().unwrap();
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("57014") && r.body.contains("--query-timeout"), "{}", r.body);
    assert!(t0.elapsed() < Duration::from_secs(60), "ended by its timeout, took {:?}", t0.elapsed());

    drop(d);

    // A request dropped by its client while its query waits, with no timeout to end the wait:
    // the dashboard cancels the statement and closes the connection.
    let d = Dashboard::start(&db, &["--query-timeout", "0"]);
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.write_all(format!("GET {}/schedules HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", d.base, d.addr).as_bytes())
        .unwrap();
    wait_until(Duration::from_secs(30), "the dropped request's query waits for the lock", || {
        dashboard_backends(&mut c, "wait_event_type = 'Lock'") == 1
    });
    drop(s);
    wait_until(Duration::from_secs(30), "the dropped request's statement no longer waits, the lock still held", || {
        dashboard_backends(&mut c, "wait_event_type = 'Lock'") == 0
    });
    // A connection lost mid-query (its backend terminated): 503, worth trying again. Seen
    // failing with 57P01 left to the 500 of other errors.
    let (addr, base) = (d.addr.clone(), d.base.clone());
    let lost = std::thread::spawn(move || {
        let other = Dashboard { child: std::process::Command::new("true").spawn().unwrap(), addr, base };
        other.get("/schedules")
    });
    wait_until(Duration::from_secs(30), "the next request's query waits for the lock", || {
        dashboard_backends(&mut c, "wait_event_type = 'Lock'") == 1
    });
    c.batch_execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE application_name = 'jqctl dashboard' AND wait_event_type = 'Lock'").unwrap();
    let r = lost.join().unwrap();
    assert!(r.status == 503 && r.body.contains("57P01"), "{} {}", r.status, r.body);
    locker.batch_execute("ROLLBACK").unwrap();
    wait_until(Duration::from_secs(30), "no dashboard connection is left active or in a transaction", || {
        dashboard_backends(&mut c, "state <> 'idle'") == 0
    });
    assert_eq!(d.get("/schedules").status, 200, "the page answers once the lock is gone");
}
