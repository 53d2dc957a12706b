//! `jqctl dashboard` in a real browser: headless Chromium (tests/common/browser.rs) against a
//! real `jqctl dashboard` process on the shared test cluster, with jobs worked by a real
//! `jqctl work`. Pages render with the data, actions taken in the browser change the database,
//! a role sees only its granted queues, and a `<script>` payload stays text. Each test writes a
//! screenshot of every page it visits to its output folder (`target/dashboard-screenshots/TEST/`
//! or `$JQ_TEST_OUTPUT/TEST/`).
//!
//! The URLs and markup the tests select on are the dashboard's contract (docs/dashboard.md):
//! `main[data-page]`, `tr[data-queue]`, `tr[data-job-id][data-state]`,
//! `pre[data-field=payload]`, `button[data-action]` in POST forms, 404 for "not there or not
//! yours".
//!
//! Negative controls (each seen failing; see the comment of each test):
//! - `JQ_CLIENT_BREAK=dashboard_actions_noop` (feature `test-breaks`): the action handlers
//!   redirect without calling jq;
//! - `JQ_CLIENT_BREAK=dashboard_raw_payload`: the payload is written into the page unescaped;
//! - `JQ_TEST_BREAK=observe_ignores_grants`: jq.overview in the test's database skips its grant
//!   check (a sabotage of the SQL read API the dashboard relies on, which enforces the grants);
//! - `JQ_TEST_BREAK=observe_hides_executions`: jq.job_executions returns no rows.
//!
//! `cargo test -p worker-client --features test-breaks --test dashboard_browser` with one of
//! them set must fail the test it names.

mod common;

use std::time::Duration;

use common::browser::{output_dir, Browser};
use common::dashboard::DashboardProc;
use common::*;

/// Page loads, waits for markup, and database states reached through the dashboard.
const LIMIT: Duration = Duration::from_secs(30);

/// The worker's command: payload `{"fail": …}` exits 3 with an error naming the job (HTML in
/// it: errors are escaped too), `{"hold": …}` reports progress and keeps running, anything else
/// completes with a result.
const SCRIPT: &str = r#"p=$(cat)
case "$p" in
  *'"fail"'*) echo "boom <b>$JQ_JOB_ID</b>" >&2; exit 3 ;;
  *'"hold"'*) echo '{"percent": 40, "step": "halfway"}' >> "$JQ_PROGRESS_FILE"; sleep 300 ;;
  *) echo '{"ok": true}' ;;
esac"#;

/// A payload that, were it written into the page as HTML, would open an alert, retitle the page
/// and set a global (twice: a script element and an image error handler).
const XSS: &str = "<script>document.title='pwned';window.__pwned=1;alert('xss')</script><img src=x onerror=window.__pwned=2>";

fn enqueue(c: &mut Client, queue: &str, payload: serde_json::Value) -> i64 {
    c.query_one("SELECT jq.enqueue($1, $2)", &[&queue, &payload]).unwrap().get(0)
}

fn paused(c: &mut Client, queue: &str) -> bool {
    c.query_one("SELECT paused FROM jq.queues WHERE name = $1", &[&queue]).unwrap().get(0)
}

/// Opens `path`, waits for `main[data-page=page]`, writes `<shot>.png`, and checks no script
/// of the page threw.
fn visit(b: &mut Browser, d: &DashboardProc, path: &str, page: &str, shot: &std::path::Path) {
    b.goto(&d.url(path), LIMIT);
    assert_eq!(b.status(), Some(200), "GET {path}: {}", b.body_text());
    b.wait_for(&format!("main[data-page={page}]"), LIMIT);
    b.screenshot(shot);
    let errors = b.js_errors();
    assert!(errors.is_empty(), "{path} threw: {errors:?}");
}

/// Every page renders with the data of a database where a real worker completed, failed (to
/// dead) and holds (running, with progress) jobs: the overview lists both queues with their
/// depths and refreshes them in place (2 s polling) when jobs arrive, the queue page lists the
/// jobs by state, the job pages show payload, error, executions and progress, the schedules page
/// the schedule, the workers page the worker (jq.fleet). The
/// database is a `jqt_bgw_*` one, which the test cluster's background worker serves, as a real
/// installation's would be. The screenshots of this test are the documentation's (docs/img/).
/// Control: `JQ_TEST_BREAK=observe_hides_executions` — jq.job_executions returns no rows, the
/// job page has no execution (seen failing).
#[test]
fn every_page_renders_with_the_data() {
    let db = TestDb::new("bgw_dash_pages");
    let mut c = db.connect();
    create_queue(&mut c, "mail", "30 seconds", ", max_attempts => 1");
    create_queue(&mut c, "reports", "30 seconds", "");
    c.batch_execute("SELECT jq.schedule('nightly-report', '0 3 * * *', 'reports', '{\"report\": \"daily\"}')").unwrap();
    let done: Vec<i64> = (0..3).map(|i| enqueue(&mut c, "mail", serde_json::json!({"to": format!("u{i}@example.com")}))).collect();
    let dead = enqueue(&mut c, "mail", serde_json::json!({"fail": true, "to": "bounce@example.com"}));
    let held = enqueue(&mut c, "mail", serde_json::json!({"hold": true}));
    let waiting = enqueue(&mut c, "reports", serde_json::json!({"report": "weekly"}));
    let _w = WorkerProc::start(&db, "mail", "dash-w1", &["--heartbeat", "1s"], SCRIPT, &[]);
    wait_until(LIMIT, "the worker completed, failed and holds its jobs", || {
        done.iter().all(|&id| state(&mut c, id).as_deref() == Some("completed"))
            && state(&mut c, dead).as_deref() == Some("dead")
            && c.query_one("SELECT progress IS NOT NULL FROM jq.jobs WHERE id = $1", &[&held]).unwrap().get::<_, bool>(0)
    });
    if jq_pg_test::broken("observe_hides_executions") {
        jq_pg_test::sabotage(&mut c, "jq.job_executions(bigint,bigint)", "AND jq._may(v_caller, e.queue, 'work')", "AND false", 1);
    }

    let out = output_dir("dashboard_pages");
    let Some(mut b) = Browser::launch(&out) else { return };
    let d = DashboardProc::start(&db.url(), "dash_pages", &[]);

    visit(&mut b, &d, "/", "overview", &out.join("overview.png"));
    let cell = |b: &mut Browser, q: &str, f: &str| b.text(&format!("tr[data-queue={q}] [data-field={f}]")).map(|t| t.trim().to_string());
    assert_eq!(cell(&mut b, "mail", "dead").as_deref(), Some("1"), "{}", b.body_text());
    assert_eq!(cell(&mut b, "mail", "running").as_deref(), Some("1"));
    assert_eq!(cell(&mut b, "reports", "claimable").as_deref(), Some("1"));
    // Live refresh: two more jobs show up in place, without a reload (the marker survives).
    b.eval("window.__same_document = true");
    enqueue(&mut c, "reports", serde_json::json!({"report": "monthly"}));
    enqueue(&mut c, "reports", serde_json::json!({"report": "yearly"}));
    b.wait_js("document.querySelector('tr[data-queue=reports] [data-field=claimable]').textContent.trim() === '3'", LIMIT);
    assert_eq!(b.eval("window.__same_document"), true, "the overview refreshed in place");

    visit(&mut b, &d, "/queues/mail", "queue", &out.join("queue.png"));
    for (st, ids) in [("completed", &done[..]), ("dead", &[dead][..]), ("running", &[held][..])] {
        b.goto(&d.url(&format!("/queues/mail?state={st}")), LIMIT);
        let listed = b.attrs("tr[data-job-id]", "data-job-id");
        for id in ids {
            assert!(listed.contains(&id.to_string()), "{st} job {id} not in {listed:?}");
            assert_eq!(b.attr(&format!("tr[data-job-id=\"{id}\"]"), "data-state").as_deref(), Some(st));
        }
        assert!(!listed.contains(&waiting.to_string()), "a reports job listed under mail");
    }

    visit(&mut b, &d, &format!("/jobs/{dead}"), "job", &out.join("job-dead.png"));
    let payload = b.text("pre[data-field=payload]").unwrap_or_default();
    assert!(payload.contains("bounce@example.com"), "payload shown: {payload:?}");
    let error = format!("exit status 3: boom <b>{dead}</b>");
    assert!(b.text("pre[data-field=last-error]").unwrap_or_default().contains(&error), "{}", b.body_text());
    assert_eq!(b.count("tr[data-outcome=failed]"), 1, "the failed execution is listed: {}", b.body_text());
    assert!(b.text("tr[data-outcome=failed]").unwrap_or_default().contains("dash-w1"));
    assert!(b.exists("button[data-action=retry]"), "a dead job offers retry");

    visit(&mut b, &d, &format!("/jobs/{held}"), "job", &out.join("job-running.png"));
    assert!(b.text("pre[data-field=progress]").unwrap_or_default().contains("halfway"), "{}", b.body_text());
    assert!(b.body_text().contains("dash-w1"), "the running job's worker");
    assert!(b.exists("button[data-action=cancel]"), "a running job offers cancel");

    visit(&mut b, &d, "/schedules", "schedules", &out.join("schedules.png"));
    assert!(b.exists("tr[data-schedule=nightly-report]"));
    assert!(b.text("tr[data-schedule=nightly-report]").unwrap_or_default().contains("0 3 * * *"));

    visit(&mut b, &d, "/workers", "workers", &out.join("workers.png"));
    b.wait_for("tr[data-worker=dash-w1]", LIMIT);
}

/// Retrying a dead job from its page, and the queue's other dead jobs with the bulk action,
/// makes them ready (read in the database), and a worker then completes them.
/// Control: `JQ_CLIENT_BREAK=dashboard_actions_noop` — the jobs stay dead (seen failing).
#[test]
fn retrying_dead_jobs_from_the_browser_makes_them_ready() {
    let db = TestDb::new("dash_retry");
    let mut c = db.connect();
    create_queue(&mut c, "mail", "30 seconds", ", max_attempts => 1");
    let dead: Vec<i64> = (0..3).map(|i| enqueue(&mut c, "mail", serde_json::json!({"fail": i}))).collect();
    let mut w = WorkerProc::start(&db, "mail", "dash-fail", &[], SCRIPT, &[]);
    wait_until(LIMIT, "the worker failed the jobs to dead", || {
        dead.iter().all(|&id| state(&mut c, id).as_deref() == Some("dead"))
    });
    // Stopped gracefully, so that a retried job stays ready until the next worker starts: a
    // SIGKILLed worker's long-poll claim goes on in its backend for up to its idle wait (5 s)
    // and can still claim the retried job (which then waits for its lease to expire).
    w.signal("TERM");
    assert!(w.wait_for(Duration::from_secs(15)).is_some(), "the worker stopped on SIGTERM");

    let out = output_dir("dashboard_retry");
    let Some(mut b) = Browser::launch(&out) else { return };
    let d = DashboardProc::start(&db.url(), "dash_retry", &[]);

    visit(&mut b, &d, &format!("/jobs/{}", dead[0]), "job", &out.join("job-dead.png"));
    b.click_and_wait("button[data-action=retry]", LIMIT);
    assert_eq!(b.status(), Some(200), "the 303 after the action led to a page");
    wait_until(LIMIT, "the retried job is ready", || state(&mut c, dead[0]).as_deref() == Some("ready"));
    assert_eq!(state(&mut c, dead[1]).as_deref(), Some("dead"), "one job retried, not the queue's");

    visit(&mut b, &d, "/queues/mail?state=dead", "queue", &out.join("queue-dead.png"));
    b.click_and_wait("button[data-action=retry-dead]", LIMIT);
    wait_until(LIMIT, "the other dead jobs are ready", || {
        dead.iter().all(|&id| state(&mut c, id).as_deref() == Some("ready"))
    });

    let _w = WorkerProc::start(&db, "mail", "dash-ok", &[], "cat > /dev/null", &[]);
    wait_until(LIMIT, "the retried jobs ran again and completed", || {
        dead.iter().all(|&id| state(&mut c, id).as_deref() == Some("completed"))
    });
}

/// Calls of jq.claim in this database so far (pg_stat_user_functions; the database has
/// `track_functions = all`). A backend reports its counts when it goes idle, at most once a
/// second, so the figure lags by about a second.
fn claim_calls(c: &mut Client) -> i64 {
    c.query_one(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_user_functions WHERE schemaname = 'jq' AND funcname = 'claim'",
        &[],
    )
    .unwrap()
    .get(0)
}

/// Pausing a queue from the browser stops claims: jobs enqueued after the pause stay ready
/// while the running worker makes at least 10 more claim attempts (counted by PostgreSQL, the
/// worker long-polls 200 ms at a time), and run after resume from the browser.
/// Control: `JQ_CLIENT_BREAK=dashboard_actions_noop` — the worker claims the jobs within the
/// window (seen failing).
#[test]
fn pausing_a_queue_from_the_browser_stops_claims() {
    let db = TestDb::new("dash_pause");
    let mut c = db.connect();
    c.batch_execute(&format!("ALTER DATABASE {} SET track_functions = 'all'", db.name)).unwrap();
    create_queue(&mut c, "flow", "30 seconds", "");
    let first = enqueue(&mut c, "flow", serde_json::json!({"n": 0}));
    let _w = WorkerProc::start(&db, "flow", "dash-flow", &["--idle-wait", "200ms"], SCRIPT, &[]);
    wait_until(LIMIT, "the worker completed a job before the pause", || state(&mut c, first).as_deref() == Some("completed"));

    let out = output_dir("dashboard_pause");
    let Some(mut b) = Browser::launch(&out) else { return };
    let d = DashboardProc::start(&db.url(), "dash_pause", &[]);
    visit(&mut b, &d, "/queues/flow", "queue", &out.join("queue-running.png"));
    b.click_and_wait("button[data-action=pause]", LIMIT);
    b.screenshot(&out.join("queue-paused.png"));

    let jobs: Vec<i64> = (1..=5).map(|n| enqueue(&mut c, "flow", serde_json::json!({"n": n}))).collect();
    let base = claim_calls(&mut c);
    wait_until(LIMIT, "the worker made 10 more claim attempts", || {
        let ready = jobs.iter().filter(|&&id| state(&mut c, id).as_deref() == Some("ready")).count();
        assert_eq!(ready, jobs.len(), "a job of the paused queue was claimed");
        claim_calls(&mut c) >= base + 10
    });
    assert!(paused(&mut c, "flow"));

    b.wait_for("button[data-action=resume]", LIMIT);
    b.click_and_wait("button[data-action=resume]", LIMIT);
    wait_until(LIMIT, "the jobs ran after the resume", || {
        jobs.iter().all(|&id| state(&mut c, id).as_deref() == Some("completed"))
    });
    assert!(!paused(&mut c, "flow"));
}

/// A login role for the test, dropped (after the test's database) on drop.
struct Role(String);

impl Role {
    fn create(tag: &str) -> Role {
        let name = format!("jqt_{tag}_{}", std::process::id());
        let mut a = jq_pg_test::admin();
        a.batch_execute(&format!("DROP ROLE IF EXISTS {name}; CREATE ROLE {name} LOGIN")).unwrap();
        Role(name)
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let _ = jq_pg_test::admin().batch_execute(&format!("DROP ROLE IF EXISTS {}", self.0));
    }
}

/// The status and text of a page, with `name` (an id or queue name in it) blanked: a 404 for
/// another tenant's object must read exactly as one for an object that does not exist.
fn not_found(b: &mut Browser, d: &DashboardProc, path: &str, name: &str) -> String {
    b.goto(&d.url(path), LIMIT);
    assert_eq!(b.status(), Some(404), "GET {path} as the tenant: {}", b.body_text());
    b.body_text().replace(name, "NAME")
}

/// POSTs a form to `path` from the page (with the page's CSRF token); the response status
/// (303 for a redirect, which `fetch` does not follow here).
fn post_from_page(b: &mut Browser, path: &str) -> i64 {
    let js = format!(
        "fetch({p}, {{method: 'POST', redirect: 'manual', body: new URLSearchParams({{csrf: \
         (document.querySelector('input[name=csrf]') || {{}}).value || ''}})}})\
         .then(r => r.type === 'opaqueredirect' ? 303 : r.status)",
        p = common::browser::js_str(path)
    );
    b.eval(&js).as_i64().unwrap()
}

/// A dashboard connected as a role granted only queue `tenant_a` shows nothing of
/// `tenant_b_secret`: not on the overview, schedules or workers pages, and its queue and job
/// URLs answer the same 404 as names that do not exist; its actions change nothing.
/// Control: `JQ_TEST_BREAK=observe_ignores_grants` — queue B appears on the overview (seen
/// failing).
#[test]
fn a_role_granted_only_queue_a_sees_nothing_of_queue_b() {
    let role = Role::create("dash_tenant");
    let db = TestDb::new("dash_grants");
    let mut c = db.connect();
    create_queue(&mut c, "tenant_a", "30 seconds", "");
    create_queue(&mut c, "tenant_b_secret", "30 seconds", "");
    c.batch_execute(&format!("SELECT jq.grant('tenant_a', '{}', 'admin')", role.0)).unwrap();
    c.batch_execute("SELECT jq.schedule('sched-a', '0 3 * * *', 'tenant_a'); SELECT jq.schedule('sched-b-secret', '0 4 * * *', 'tenant_b_secret')").unwrap();
    let a_job = enqueue(&mut c, "tenant_a", serde_json::json!({"tenant": "a"}));
    let b_job = enqueue(&mut c, "tenant_b_secret", serde_json::json!({"tenant": "b-secret-payload"}));
    let _wb = WorkerProc::start(&db, "tenant_b_secret", "b-secret-worker", &["--heartbeat", "1s"], "sleep 300", &[]);
    let _wa = WorkerProc::start(&db, "tenant_a", "a-worker", &["--heartbeat", "1s"], "sleep 300", &[]);
    wait_until(LIMIT, "both jobs running", || {
        state(&mut c, a_job).as_deref() == Some("running") && state(&mut c, b_job).as_deref() == Some("running")
    });
    if jq_pg_test::broken("observe_ignores_grants") {
        jq_pg_test::sabotage(&mut c, "jq.overview(text,integer,bigint)", "AND jq._may(v_caller, t.name, 'any')", "", 1);
    }

    let out = output_dir("dashboard_grants");
    let Some(mut b) = Browser::launch(&out) else { return };
    let url = format!("postgresql://{}@{}:{}/{}", role.0, host(), db.port, db.name);
    let d = DashboardProc::start(&url, "dash_grants", &[]);

    for (path, page) in [("/", "overview"), ("/schedules", "schedules"), ("/workers", "workers"), ("/queues/tenant_a", "queue")] {
        visit(&mut b, &d, path, page, &out.join(format!("{page}.png")));
        let text = b.body_text();
        assert!(!text.contains("tenant_b_secret") && !text.contains("b-secret"), "{path} shows queue B: {text}");
    }
    b.goto(&d.url("/"), LIMIT);
    assert!(b.exists("tr[data-queue=tenant_a]"), "the granted queue is listed");
    assert!(!b.exists("tr[data-queue=tenant_b_secret]"));
    b.goto(&d.url("/schedules"), LIMIT);
    assert!(b.body_text().contains("sched-a"));
    b.goto(&d.url("/workers"), LIMIT);
    b.wait_for("tr[data-worker=a-worker]", LIMIT);
    b.goto(&d.url(&format!("/jobs/{a_job}")), LIMIT);
    assert_eq!(b.status(), Some(200));

    let b_queue = not_found(&mut b, &d, "/queues/tenant_b_secret", "tenant_b_secret");
    let no_queue = not_found(&mut b, &d, "/queues/no_such_queue", "no_such_queue");
    assert_eq!(b_queue, no_queue, "a 404 tells another tenant's queue from a missing one");
    assert!(!not_found(&mut b, &d, "/queues/tenant_b_secret?state=running", "tenant_b_secret").contains("b-secret-payload"));
    let b_page = not_found(&mut b, &d, &format!("/jobs/{b_job}"), &b_job.to_string());
    let no_page = not_found(&mut b, &d, "/jobs/987654321", "987654321");
    assert_eq!(b_page, no_page, "a 404 tells another tenant's job from a missing one");
    b.screenshot(&out.join("not-found.png"));

    // Actions on queue B, posted with a valid CSRF token from queue A's page, change nothing.
    b.goto(&d.url("/queues/tenant_a"), LIMIT);
    for path in ["/queues/tenant_b_secret/pause".to_string(), format!("/jobs/{b_job}/cancel")] {
        let status = post_from_page(&mut b, &path);
        assert!(status == 404 || status == 403, "POST {path} as the tenant answered {status}");
    }
    assert!(!paused(&mut c, "tenant_b_secret"));
    assert_eq!(state(&mut c, b_job).as_deref(), Some("running"));
    let cancel: bool = c.query_one("SELECT cancel_requested FROM jq.jobs WHERE id = $1", &[&b_job]).unwrap().get(0);
    assert!(!cancel, "queue B's job was asked to cancel");
}

/// A payload (and an error) holding `<script>` and an `<img onerror>` render as text on the job
/// page and the queue page: no dialog opens, the title and the global the payload sets stay
/// untouched, no element of the payload exists in the page.
/// Control: `JQ_CLIENT_BREAK=dashboard_raw_payload` — the payload's `<img>` is an element of the
/// page (seen failing; its script and handler are still stopped by the dashboard's
/// Content-Security-Policy, so the element checks, not the dialog check, catch it).
#[test]
fn a_script_payload_renders_as_text_and_does_not_run() {
    let db = TestDb::new("dash_xss");
    let mut c = db.connect();
    create_queue(&mut c, "xss", "30 seconds", ", max_attempts => 1");
    let id = enqueue(&mut c, "xss", serde_json::json!({"fail": true, "html": XSS}));
    let _w = WorkerProc::start(&db, "xss", "dash-xss", &[], &SCRIPT.replace("boom", XSS), &[]);
    wait_until(LIMIT, "the job failed to dead", || state(&mut c, id).as_deref() == Some("dead"));

    let out = output_dir("dashboard_xss");
    let Some(mut b) = Browser::launch(&out) else { return };
    let d = DashboardProc::start(&db.url(), "dash_xss", &[]);
    for (path, page) in [(format!("/jobs/{id}"), "job"), ("/queues/xss?state=dead".to_string(), "queue"), ("/".to_string(), "overview")] {
        visit(&mut b, &d, &path, page, &out.join(format!("{page}.png")));
        let title = b.eval("document.title");
        assert_ne!(title, "pwned", "{path}: the payload's script ran");
        assert_eq!(b.eval("typeof window.__pwned"), "undefined", "{path}: the payload's code ran");
        assert_eq!(b.count("img[src=x]"), 0, "{path}: the payload's image is an element");
        let dialogs = b.dialogs();
        assert!(dialogs.is_empty(), "{path}: a dialog opened: {dialogs:?}");
    }
    b.goto(&d.url(&format!("/jobs/{id}")), LIMIT);
    let shown = b.text("pre[data-field=payload]").unwrap_or_default();
    assert!(shown.contains(XSS), "the payload shows as text: {shown:?}");
    assert_eq!(b.count("pre[data-field=payload] *"), 0, "no element inside the payload");
    assert!(b.body_text().contains(XSS), "the error shows as text");
}
