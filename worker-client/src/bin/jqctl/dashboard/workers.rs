//! The workers page (`/workers`): the fleet registry (view jq.fleet, when this jq has it) with
//! each worker's queues, concurrency, jobs in flight, memory and a running-jobs chart from its
//! samples. The view shows only workers of queues the role may see.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Query, State};
use axum::response::Response;

use super::render::{age, bytes, live_page, sparkline, Page, Series};
use super::AppRef;

/// One worker.
pub struct WorkerRow {
    pub name: String,
    pub state: String,
    pub host: String,
    pub pid: String,
    pub versions: String,
    pub queues: String,
    pub in_flight: String,
    pub rss: String,
    pub started: String,
    pub last_beat: String,
    pub chart: String,
}

#[derive(Template)]
#[template(path = "workers_live.html")]
struct Live {
    registry: bool,
    workers: Vec<WorkerRow>,
}

#[derive(Template)]
#[template(path = "workers.html")]
struct Full {
    base: String,
    read_only: bool,
    live: String,
}

/// Running-jobs and RSS series from a worker's samples (JSON array of {"at", "running", "rss"}).
fn chart(samples: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(samples).unwrap_or_default();
    let arr = v.as_array().cloned().unwrap_or_default();
    let running: Vec<f64> = arr.iter().map(|s| s.get("running").and_then(|x| x.as_f64()).unwrap_or(0.0)).collect();
    let max = running.iter().copied().fold(0.0, f64::max);
    sparkline(&[Series { values: &running, class: "running" }], 160, 28, &format!("running jobs per beat, max {max}"))
}

async fn live(app: &AppRef) -> Result<Live, super::db::Error> {
    let exists: bool = app
        .db
        .opt("SELECT to_regclass('jq.fleet') IS NOT NULL", &[])
        .await?
        .map(|r| r.get(0))
        .unwrap_or(false);
    if !exists {
        return Ok(Live { registry: false, workers: Vec::new() });
    }
    let rows = app
        .db
        .rows(
            "SELECT name::text, state::text, coalesce(hostname::text, ''), coalesce(pid::text, ''),
                    coalesce(client_version::text, '') || ' / jq ' || coalesce(jq_version::text, ''),
                    coalesce(array_to_string(queues, ', '), ''),
                    coalesce(in_flight::text, '0') || ' / ' || coalesce(concurrency::text, '?'),
                    coalesce(rss_bytes, 0)::int8,
                    extract(epoch FROM now() - started_at)::float8,
                    extract(epoch FROM now() - last_beat_at)::float8,
                    coalesce(samples::text, '[]')
             FROM jq.fleet ORDER BY state, name",
            &[],
        )
        .await?;
    let workers = rows
        .iter()
        .map(|r| WorkerRow {
            name: r.get(0),
            state: r.get(1),
            host: r.get(2),
            pid: r.get(3),
            versions: r.get(4),
            queues: r.get(5),
            in_flight: r.get(6),
            rss: bytes(r.get(7)),
            started: r.get::<_, Option<f64>>(8).map(|s| format!("{} ago", age(s))).unwrap_or_default(),
            last_beat: r.get::<_, Option<f64>>(9).map(|s| format!("{} ago", age(s))).unwrap_or_default(),
            chart: chart(r.get(10)),
        })
        .collect();
    Ok(Live { registry: true, workers })
}

/// GET /workers.
pub async fn page(State(app): State<AppRef>, Query(q): Query<HashMap<String, String>>) -> Response {
    let live = match live(&app).await {
        Ok(l) => l.render(),
        Err(e) => return Page::db(&app, &e),
    };
    live_page(q.contains_key("fragment"), live, |live| {
        Full { base: app.base.clone(), read_only: app.args.read_only, live }.render()
    })
}
