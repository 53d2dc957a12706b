//! The schedules page (`/schedules`): every cron schedule of the role's queues
//! (jq.schedule_list) with next and last fire, fired and skipped counts, the last error, the
//! latest entries of its fire log (jq.cron_log), and enable / disable.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Query, State};
use axum::response::Response;
use tokio_postgres::types::Type;

use super::render::{live_page, thousands, Page};
use super::AppRef;

/// Fire-log entries shown per schedule.
const LOG: i32 = 10;

/// One schedule.
pub struct ScheduleRow {
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub queue: String,
    pub kind: String,
    pub enabled: bool,
    pub policy: String,
    pub next: String,
    pub last: String,
    pub last_job: Option<i64>,
    pub fired: String,
    pub skipped: String,
    pub error: String,
    pub log: Vec<[String; 5]>,
}

#[derive(Template)]
#[template(path = "schedules_live.html")]
struct Live {
    base: String,
    read_only: bool,
    csrf: String,
    schedules: Vec<ScheduleRow>,
}

#[derive(Template)]
#[template(path = "schedules.html")]
struct Full {
    base: String,
    read_only: bool,
    live: String,
}

const TS: &str = "'YYYY-MM-DD HH24:MI:SS'";

async fn live(app: &AppRef) -> Result<Live, super::db::Error> {
    let sql = format!(
        "SELECT name, cron, timezone, queue, coalesce(kind, ''), enabled, misfire || ', ' || overlap,
                coalesce(to_char(next_run_at, {TS}), '-'), coalesce(to_char(last_fired_at, {TS}), '-'),
                last_job_id, fired_count, skipped_count,
                coalesce(last_error || ' (' || to_char(last_error_at, {TS}) || ')', '')
         FROM jq.schedule_list()"
    );
    let log_sql = format!(
        "SELECT to_char(fire_time, {TS}), outcome, coalesce(job_id::text, ''), to_char(fired_at, {TS}), coalesce(error, '')
         FROM jq.cron_log($1, $2)"
    );
    let mut schedules = Vec::new();
    for r in app.db.rows(&sql, &[]).await? {
        let name: String = r.get(0);
        let log = app
            .db
            .rows(&log_sql, &[(&name, Type::TEXT), (&LOG, Type::INT4)])
            .await?
            .iter()
            .map(|l| [l.get(0), l.get(1), l.get(2), l.get(3), l.get(4)])
            .collect();
        schedules.push(ScheduleRow {
            cron: r.get(1),
            timezone: r.get(2),
            queue: r.get(3),
            kind: r.get(4),
            enabled: r.get(5),
            policy: r.get(6),
            next: r.get(7),
            last: r.get(8),
            last_job: r.get(9),
            fired: thousands(r.get(10)),
            skipped: thousands(r.get(11)),
            error: r.get(12),
            log,
            name,
        });
    }
    Ok(Live { base: app.base.clone(), read_only: app.args.read_only, csrf: app.csrf.clone(), schedules })
}

/// GET /schedules.
pub async fn page(State(app): State<AppRef>, Query(q): Query<HashMap<String, String>>) -> Response {
    let live = match live(&app).await {
        Ok(l) => l.render(),
        Err(e) => return Page::db(&app, &e),
    };
    live_page(q.contains_key("fragment"), live, |live| {
        Full { base: app.base.clone(), read_only: app.args.read_only, live }.render()
    })
}
