//! The job page (`/jobs/{id}`): payload, result, progress, last error, lease and worker
//! (jq.job_detail), every ended execution (jq.job_executions), and retry / cancel / take back.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use tokio_postgres::types::Type;

use super::render::{html, Page};
use super::AppRef;

/// An execution of the history.
pub struct Execution {
    pub seq: i64,
    pub attempt: i32,
    pub outcome: String,
    pub started: String,
    pub finished: String,
    pub worker: String,
    pub error: String,
}

#[derive(Template)]
#[template(path = "job_live.html")]
struct Live {
    base: String,
    read_only: bool,
    csrf: String,
    id: i64,
    queue: String,
    state: String,
    fields: Vec<(&'static str, String)>,
    payload: String,
    /// Negative control `dashboard_raw_payload`: the payload inserted unescaped.
    raw: bool,
    result: Option<String>,
    progress: Option<String>,
    last_error: Option<String>,
    executions: Vec<Execution>,
}

#[derive(Template)]
#[template(path = "job.html")]
struct Full {
    base: String,
    read_only: bool,
    id: i64,
    live: String,
}

/// JSON pretty-printed (the text is escaped by the template).
fn pretty(v: Option<serde_json::Value>) -> Option<String> {
    v.map(|v| serde_json::to_string_pretty(&v).unwrap_or_default())
}

const TS: &str = "'YYYY-MM-DD HH24:MI:SS.MS'";

async fn live(app: &AppRef, id: i64) -> Result<Option<Live>, super::db::Error> {
    let sql = format!(
        "SELECT id, queue, kind, state::text, priority, attempt, max_attempts, claims, lease_expiries,
                to_char(run_at, {TS}), to_char(created_at, {TS}), to_char(started_at, {TS}),
                to_char(finished_at, {TS}), to_char(lease_expires_at, {TS}), worker, cancel_requested,
                concurrency_key, idempotency_key, timeout::text, payload, result, progress, last_error
         FROM jq.job_detail($1)"
    );
    let Some(r) = app.db.opt(&sql, &[(&id, Type::INT8)]).await? else { return Ok(None) };
    let o = |i: usize| r.get::<_, Option<String>>(i).unwrap_or_else(|| "-".into());
    let state: String = r.get(3);
    let fields = vec![
        ("kind", o(2)),
        ("priority", r.get::<_, i32>(4).to_string()),
        ("attempt", format!("{} of {}", r.get::<_, i32>(5), r.get::<_, i32>(6))),
        ("executions started", r.get::<_, i64>(7).to_string()),
        ("lease expiries", r.get::<_, i32>(8).to_string()),
        ("run at", o(9)),
        ("created", o(10)),
        ("started", o(11)),
        ("finished", o(12)),
        ("lease until", o(13)),
        ("worker", o(14)),
        ("cancel requested", r.get::<_, bool>(15).to_string()),
        ("concurrency key", o(16)),
        ("idempotency key", o(17)),
        ("timeout", o(18)),
    ];
    let exec_sql = format!(
        "SELECT seq, attempt, outcome::text, to_char(started_at, {TS}), to_char(finished_at, {TS}), worker, error
         FROM jq.job_executions($1)"
    );
    let executions = app
        .db
        .rows(&exec_sql, &[(&id, Type::INT8)])
        .await?
        .iter()
        .map(|e| Execution {
            seq: e.get(0),
            attempt: e.get(1),
            outcome: e.get(2),
            started: e.get::<_, Option<String>>(3).unwrap_or_default(),
            finished: e.get::<_, Option<String>>(4).unwrap_or_default(),
            worker: e.get::<_, Option<String>>(5).unwrap_or_default(),
            error: e.get::<_, Option<String>>(6).unwrap_or_default(),
        })
        .collect();
    Ok(Some(Live {
        base: app.base.clone(),
        read_only: app.args.read_only,
        csrf: app.csrf.clone(),
        id,
        queue: r.get(1),
        state,
        fields,
        payload: pretty(r.get(19)).unwrap_or_default(),
        raw: super::security::broken("dashboard_raw_payload"),
        result: pretty(r.get(20)),
        progress: pretty(r.get(21)),
        last_error: r.get(22),
        executions,
    }))
}

/// GET /jobs/{id}.
pub async fn page(State(app): State<AppRef>, Path(id): Path<String>, Query(q): Query<HashMap<String, String>>) -> Response {
    let Ok(id) = id.parse::<i64>() else { return Page::not_found(&app) };
    let live = match live(&app, id).await {
        Ok(Some(l)) => l.render(),
        Ok(None) => return Page::not_found(&app),
        Err(e) => return Page::db(&app, &e),
    };
    if q.contains_key("fragment") {
        return html(StatusCode::OK, live);
    }
    match live {
        Ok(live) => html(StatusCode::OK, Full { base: app.base.clone(), read_only: app.args.read_only, id, live }.render()),
        Err(e) => html(StatusCode::OK, Err(e)),
    }
}
