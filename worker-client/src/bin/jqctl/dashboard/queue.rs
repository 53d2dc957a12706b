//! The queue page (`/queues/{queue}`): settings and kinds, pause / resume, the jobs of one state
//! with filters (kind, key, text in error) and keyset paging (jq.list_jobs: `after` = the last
//! id of the previous page), and bulk retry / cancel of the dead jobs matching the filters.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use tokio_postgres::types::Type;

use super::overview::{flow_summary, rates, throughput};
use super::render::{age, capped, html, Page};
use super::AppRef;

/// The states, in the order of the tabs.
pub const STATES: [&str; 7] = ["ready", "scheduled", "running", "blocked", "dead", "completed", "cancelled"];

/// Jobs per page.
const PAGE: i32 = 50;

/// Jobs read at most per page of a filtered listing (jq.list_jobs' scan_limit).
const SCAN: i32 = 2000;

/// One job of the listing.
pub struct JobRow {
    pub id: i64,
    pub state: String,
    pub kind: String,
    pub priority: i32,
    pub attempts: String,
    pub when: String,
    pub worker: String,
    pub keys: String,
    pub error: String,
}

/// A state tab.
pub struct Tab {
    pub state: &'static str,
    pub count: String,
    pub current: bool,
}

#[derive(Template)]
#[template(path = "queue_live.html")]
struct Live {
    base: String,
    read_only: bool,
    csrf: String,
    queue: String,
    paused: bool,
    state: String,
    tabs: Vec<Tab>,
    jobs: Vec<JobRow>,
    filters: Vec<(String, String)>,
    filter_query: String,
    next: Option<i64>,
    scanned_out: bool,
    back: String,
    oldest: String,
    chart: String,
}

#[derive(Template)]
#[template(path = "queue.html")]
struct Full {
    base: String,
    read_only: bool,
    queue: String,
    state: String,
    kind: String,
    key: String,
    error: String,
    settings: Vec<(String, String)>,
    flow: String,
    aging: bool,
    kinds: Vec<Vec<String>>,
    live: String,
}

/// A query parameter, empty as None.
fn param<'a>(q: &'a HashMap<String, String>, k: &str) -> Option<&'a str> {
    q.get(k).map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// Percent-encodes a path segment or query value.
pub fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// `a=b&c=d` of the given filters, percent-encoded.
pub fn query_string(pairs: &[(String, String)]) -> String {
    use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", utf8_percent_encode(v, NON_ALPHANUMERIC)))
        .collect::<Vec<_>>()
        .join("&")
}

fn text(v: Option<String>) -> String {
    v.unwrap_or_default()
}

async fn jobs(app: &AppRef, queue: &str, state: &str, q: &HashMap<String, String>, after: Option<i64>)
    -> Result<(Vec<JobRow>, Option<i64>, bool), super::db::Error> {
    let (kind, key, error) = (param(q, "kind"), param(q, "key"), param(q, "error"));
    let rows = app
        .db
        .rows(
            "SELECT id, state::text, kind, priority, attempt, max_attempts,
                    to_char(CASE WHEN state IN ('completed', 'dead', 'cancelled') THEN finished_at
                                 WHEN state = 'running' THEN lease_expires_at ELSE run_at END,
                            'YYYY-MM-DD HH24:MI:SS'),
                    worker, concurrency_key, idempotency_key, last_error, cursor_only
             FROM jq.list_jobs($1, $2::text::jq.job_state, $3, $4, $5, $6, $7, $8)",
            &[(&queue, Type::TEXT), (&state, Type::TEXT), (&kind, Type::TEXT), (&key, Type::TEXT),
              (&error, Type::TEXT), (&after, Type::INT8), (&PAGE, Type::INT4), (&SCAN, Type::INT4)],
        )
        .await?;
    let mut out = Vec::new();
    let mut resume = None;
    for r in rows {
        if r.get::<_, bool>(11) {
            resume = Some(r.get(0));
            continue;
        }
        let keys = [r.get::<_, Option<String>>(8).map(|k| format!("key {k}")),
                    r.get::<_, Option<String>>(9).map(|k| format!("idem {k}"))]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ");
        out.push(JobRow {
            id: r.get(0),
            state: text(r.get(1)),
            kind: text(r.get(2)),
            priority: r.get::<_, Option<i32>>(3).unwrap_or(0),
            attempts: format!("{}/{}", r.get::<_, Option<i32>>(4).unwrap_or(0), r.get::<_, Option<i32>>(5).unwrap_or(0)),
            when: text(r.get(6)),
            worker: text(r.get(7)),
            keys,
            error: text(r.get(10)),
        });
    }
    let scanned_out = resume.is_some();
    let next = resume.or_else(|| (out.len() as i32 == PAGE).then(|| out.last().map(|j| j.id)).flatten());
    Ok((out, next, scanned_out))
}

/// GET /queues/{queue}.
pub async fn page(State(app): State<AppRef>, Path(queue): Path<String>, Query(q): Query<HashMap<String, String>>) -> Response {
    let state = param(&q, "state").unwrap_or("ready").to_string();
    if !STATES.contains(&state.as_str()) {
        return Page::error(&app, StatusCode::BAD_REQUEST, &format!("Unknown state {state:?}; states: {}.", STATES.join(", ")));
    }
    let after = match param(&q, "after").map(str::parse::<i64>) {
        None => None,
        Some(Ok(a)) => Some(a),
        Some(Err(_)) => return Page::error(&app, StatusCode::BAD_REQUEST, "after must be a job id."),
    };
    let cap = app.args.depth_cap;
    let ov = match app
        .db
        .opt(
            "SELECT claimable, scheduled, running, blocked, dead, extract(epoch FROM oldest_claimable_age)::float8,
                    paused, settings::text
             FROM jq.overview(only_queue => $1, depth_cap => $2)",
            &[(&queue, Type::TEXT), (&cap, Type::INT4)],
        )
        .await
    {
        Ok(Some(r)) => r,
        Ok(None) => return Page::not_found(&app),
        Err(e) => return Page::db(&app, &e),
    };
    let counts: Vec<i64> = (0..5).map(|i| ov.get(i)).collect();
    let tabs = STATES
        .iter()
        .enumerate()
        .map(|(i, s)| Tab { state: s, count: counts.get(i).map(|c| capped(*c, cap)).unwrap_or_default(), current: *s == state })
        .collect();
    let (rows, next, scanned_out) = match jobs(&app, &queue, &state, &q, after).await {
        Ok(x) => x,
        Err(e) => return Page::db(&app, &e),
    };
    let (c, f, d, partial) = match throughput(&app, &queue).await {
        Ok(x) => x,
        Err(e) => return Page::db(&app, &e),
    };
    let filters: Vec<(String, String)> = ["kind", "key", "error"]
        .iter()
        .filter_map(|k| param(&q, k).map(|v| (k.to_string(), v.to_string())))
        .collect();
    let mut back_pairs = vec![("state".to_string(), state.clone())];
    back_pairs.extend(filters.iter().cloned());
    let live = Live {
        base: app.base.clone(),
        read_only: app.args.read_only,
        csrf: app.csrf.clone(),
        queue: queue.clone(),
        paused: ov.get(6),
        state: state.clone(),
        tabs,
        jobs: rows,
        filter_query: query_string(&filters),
        back: format!("/queues/{}?{}", enc(&queue), query_string(&back_pairs)),
        filters,
        next,
        scanned_out,
        oldest: ov.get::<_, Option<f64>>(5).map(age).unwrap_or_else(|| "-".into()),
        chart: rates(&c, &f, &d, partial).chart,
    }
    .render();
    if q.contains_key("fragment") {
        return html(StatusCode::OK, live);
    }
    let settings: serde_json::Value = serde_json::from_str(ov.get::<_, &str>(7)).unwrap_or_default();
    let kinds = match kinds(&app, &queue).await {
        Ok(k) => k,
        Err(e) => return Page::db(&app, &e),
    };
    let live = match live {
        Ok(l) => l,
        Err(e) => return html(StatusCode::OK, Err(e)),
    };
    let aging = settings.get("priority_aging").is_some_and(|v| !v.is_null());
    let full = Full {
        base: app.base.clone(),
        read_only: app.args.read_only,
        kind: param(&q, "kind").unwrap_or("").into(),
        key: param(&q, "key").unwrap_or("").into(),
        error: param(&q, "error").unwrap_or("").into(),
        flow: flow_summary(&settings),
        settings: settings
            .as_object()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), if v.is_null() { "-".into() } else { v.to_string().trim_matches('"').to_string() })).collect())
            .unwrap_or_default(),
        aging,
        kinds,
        queue,
        state,
        live,
    };
    html(StatusCode::OK, full.render())
}

/// The queue's kinds from jq.kind_policies (which shows only the reader's queues).
async fn kinds(app: &AppRef, queue: &str) -> Result<Vec<Vec<String>>, super::db::Error> {
    Ok(app
        .db
        .rows(
            "SELECT kind, max_attempts::text, backoff::text, backoff_base::text, backoff_max::text, jitter::text,
                    coalesce(timeout::text, '-'), coalesce(on_dead, '-'), hooks_pending::text
             FROM jq.kind_policies WHERE queue = $1 ORDER BY kind",
            &[(&queue, Type::TEXT)],
        )
        .await?
        .iter()
        .map(|r| (0..9).map(|i| r.get::<_, Option<String>>(i).unwrap_or_default()).collect())
        .collect())
}
