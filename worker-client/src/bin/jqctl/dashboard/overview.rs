//! The overview page (`/`): every queue the role may see (jq.overview) with its per-minute
//! throughput over the last hour (jq.throughput), the background workers (jq.status()), table
//! health (jq.table_health, jq_admin only) and the signals with their thresholds.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Query, State};
use axum::response::Response;
use tokio_postgres::types::Type;

use super::render::{age, bytes, capped, live_page, sparkline, thousands, Page, Series, Signal};
use super::AppRef;

/// One queue's row.
pub struct QueueRow {
    pub name: String,
    pub claimable: String,
    pub scheduled: String,
    pub running: String,
    pub blocked: String,
    pub dead: String,
    pub oldest: String,
    pub oldest_alert: bool,
    pub depth_alert: bool,
    pub paused: bool,
    pub flow: String,
    pub chart: String,
    pub per_minute: String,
    pub failure_rate: String,
    pub failure_alert: bool,
}

/// One row of jq.status().
pub struct StatusRow {
    pub database: String,
    pub state: String,
    pub pid: String,
    pub last_pass: String,
    pub passes: String,
    pub pass_ms: String,
    pub last_error: String,
}

/// One row of jq.table_health.
pub struct HealthRow {
    pub table: String,
    pub size: String,
    pub live: String,
    pub dead: String,
    pub ratio: String,
    pub alert: bool,
    pub last_autovacuum: String,
}

#[derive(Template)]
#[template(path = "overview_live.html")]
struct Live {
    queues: Vec<QueueRow>,
    status: Vec<StatusRow>,
    health: Option<Vec<HealthRow>>,
    oldest_xact: String,
    signals: Vec<Signal>,
    base: String,
}

#[derive(Template)]
#[template(path = "overview.html")]
struct Full {
    base: String,
    read_only: bool,
    live: String,
}

/// The flow-control settings of a queue, from jq.overview's settings, in a few words.
pub fn flow_summary(s: &serde_json::Value) -> String {
    let get = |k: &str| s.get(k).filter(|v| !v.is_null()).map(|v| v.to_string().trim_matches('"').to_string());
    let mut parts = Vec::new();
    if let Some(v) = get("max_concurrency") {
        parts.push(format!("max {v} running"));
    }
    if let Some(v) = get("key_concurrency").filter(|v| v != "1") {
        parts.push(format!("{v} per key"));
    }
    if let (Some(l), Some(p)) = (get("rate_limit"), get("rate_period")) {
        parts.push(format!("{l} per {p} (burst {})", get("rate_burst").unwrap_or_default()));
    }
    if let Some(v) = get("priority_aging") {
        parts.push(format!("aging +1 per {v}"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// The per-minute throughput of a queue: (completed, failed, dead) series and whether any
/// minute is partial.
pub async fn throughput(app: &AppRef, queue: &str) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>, bool), super::db::Error> {
    let rows = app
        .db
        .rows(
            "SELECT completed::float8, failed::float8, dead::float8, partial FROM jq.throughput($1, max_rows => 2000)",
            &[(&queue, Type::TEXT)],
        )
        .await?;
    let mut c = Vec::new();
    let mut f = Vec::new();
    let mut d = Vec::new();
    let mut partial = false;
    for r in rows {
        c.push(r.get(0));
        f.push(r.get(1));
        d.push(r.get(2));
        partial |= r.get::<_, bool>(3);
    }
    Ok((c, f, d, partial))
}

/// The chart and figures of a queue's last hour.
pub struct Rates {
    pub chart: String,
    pub per_minute: String,
    pub failure_rate: f64,
}

/// Per-minute series of every visible queue: one call of jq.throughput (the failed executions
/// of all queues are read in one scan of the log), at most 2,000 completed and 2,000 dead jobs
/// per queue (a busier hour shows its older minutes as partial, in the chart's title).
pub type Throughput = (Vec<f64>, Vec<f64>, Vec<f64>, bool);

async fn throughput_all(app: &AppRef) -> Result<HashMap<String, Throughput>, super::db::Error> {
    let rows = app
        .db
        .rows("SELECT queue, completed::float8, failed::float8, dead::float8, partial FROM jq.throughput(max_rows => 2000)", &[])
        .await?;
    let mut out: HashMap<String, Throughput> = HashMap::new();
    for r in rows {
        let e = out.entry(r.get(0)).or_default();
        e.0.push(r.get(1));
        e.1.push(r.get(2));
        e.2.push(r.get(3));
        e.3 |= r.get::<_, bool>(4);
    }
    Ok(out)
}

/// Chart and rates from the throughput series (the last 15 minutes for the failure rate).
pub fn rates(c: &[f64], f: &[f64], d: &[f64], partial: bool) -> Rates {
    let tail = |v: &[f64], n: usize| v.iter().rev().take(n).sum::<f64>();
    let (c15, f15) = (tail(c, 15), tail(f, 15));
    let failure_rate = if c15 + f15 > 0.0 { 100.0 * f15 / (c15 + f15) } else { 0.0 };
    let max = c.iter().chain(f).chain(d).copied().fold(0.0, f64::max);
    let title = format!("per minute, last hour: completed / failed / dead; max {max}{}", if partial { " (older minutes partial)" } else { "" });
    let chart = sparkline(
        &[
            Series { values: c, class: "completed" },
            Series { values: f, class: "failed" },
            Series { values: d, class: "dead" },
        ],
        160,
        28,
        &title,
    );
    let last = |v: &[f64]| v.iter().rev().nth(1).copied().unwrap_or(0.0) as i64;
    Rates { chart, per_minute: format!("{} / {} / {}", last(c), last(f), last(d)), failure_rate }
}

async fn live(app: &AppRef) -> Result<Live, super::db::Error> {
    let a = &app.args;
    let cap = a.depth_cap;
    let rows = app
        .db
        .rows(
            "SELECT queue, claimable, scheduled, running, blocked, dead,
                    extract(epoch FROM oldest_claimable_age)::float8, paused, settings::text
             FROM jq.overview(depth_cap => $1)",
            &[(&cap, Type::INT4)],
        )
        .await?;
    let mut queues = Vec::new();
    let mut signals = Vec::new();
    let mut series = throughput_all(app).await?;
    for r in rows {
        let name: String = r.get(0);
        let (claimable, scheduled): (i64, i64) = (r.get(1), r.get(2));
        let oldest: Option<f64> = r.get(6);
        let settings: serde_json::Value = serde_json::from_str(r.get::<_, &str>(8)).unwrap_or_default();
        let (c, f, d, partial) = series.remove(&name).unwrap_or_default();
        let rt = rates(&c, &f, &d, partial);
        let depth = claimable + scheduled;
        let oldest_alert = oldest.is_some_and(|o| o > a.max_oldest_pending);
        let depth_alert = depth > a.max_depth;
        let failure_alert = rt.failure_rate > a.max_failure_rate;
        let depth_text = if claimable > cap as i64 || scheduled > cap as i64 {
            format!("{}+", thousands(depth.min(2 * cap as i64)))
        } else {
            thousands(depth)
        };
        signals.push(Signal {
            name: format!("{name}: oldest pending"),
            value: oldest.map(age).unwrap_or_else(|| "-".into()),
            threshold: age(a.max_oldest_pending),
            crossed: oldest_alert,
        });
        signals.push(Signal { name: format!("{name}: depth"), value: depth_text, threshold: thousands(a.max_depth), crossed: depth_alert });
        signals.push(Signal {
            name: format!("{name}: failure rate (15 min)"),
            value: format!("{:.1} %", rt.failure_rate),
            threshold: format!("{:.1} %", a.max_failure_rate),
            crossed: failure_alert,
        });
        queues.push(QueueRow {
            claimable: capped(claimable, cap),
            scheduled: capped(scheduled, cap),
            running: capped(r.get(3), cap),
            blocked: capped(r.get(4), cap),
            dead: capped(r.get(5), cap),
            oldest: oldest.map(age).unwrap_or_else(|| "-".into()),
            oldest_alert,
            depth_alert,
            paused: r.get(7),
            flow: flow_summary(&settings),
            chart: rt.chart,
            per_minute: rt.per_minute,
            failure_rate: format!("{:.1} %", rt.failure_rate),
            failure_alert,
            name,
        });
    }
    let status = app
        .db
        .rows(
            "SELECT database::text, state, pid::text, to_char(last_pass_at, 'YYYY-MM-DD HH24:MI:SS'), passes,
                    pass_ms, last_error FROM jq.status()",
            &[],
        )
        .await?
        .iter()
        .map(|r| StatusRow {
            database: r.get::<_, Option<String>>(0).unwrap_or_default(),
            state: r.get(1),
            pid: r.get::<_, Option<String>>(2).unwrap_or_default(),
            last_pass: r.get::<_, Option<String>>(3).unwrap_or_default(),
            passes: thousands(r.get::<_, Option<i64>>(4).unwrap_or(0)),
            pass_ms: r.get::<_, Option<f64>>(5).map(|v| format!("{v:.1} ms")).unwrap_or_default(),
            last_error: r.get::<_, Option<String>>(6).unwrap_or_default(),
        })
        .collect();
    let (health, oldest_xact) = table_health(app, &mut signals).await?;
    history_signals(app, &mut signals).await?;
    Ok(Live { queues, status, health, oldest_xact, signals, base: app.base.clone() })
}

/// jq.table_health (SELECT is jq_admin's): None when the role may not read it.
async fn table_health(app: &AppRef, signals: &mut Vec<Signal>) -> Result<(Option<Vec<HealthRow>>, String), super::db::Error> {
    let rows = match app
        .db
        .rows(
            "SELECT table_name, total_bytes, coalesce(live_tuples, 0), coalesce(dead_tuples, 0),
                    coalesce(dead_ratio, 0)::float8, coalesce(to_char(last_autovacuum, 'YYYY-MM-DD HH24:MI:SS'), '-'),
                    extract(epoch FROM oldest_xact_age)::float8
             FROM jq.table_health",
            &[],
        )
        .await
    {
        Ok(rows) => rows,
        Err(e) if e.code() == Some("42501") => return Ok((None, String::new())),
        Err(e) => return Err(e),
    };
    let max = app.args.max_dead_ratio;
    let mut oldest = String::from("-");
    let health = rows
        .iter()
        .map(|r| {
            let table: String = r.get(0);
            let ratio: f64 = r.get(4);
            if let Some(x) = r.get::<_, Option<f64>>(6) {
                oldest = age(x);
            }
            let alert = ratio > max && r.get::<_, i64>(3) > 1000;
            if table == "jobs" || alert {
                signals.push(Signal {
                    name: format!("table {table}: dead tuples"),
                    value: format!("{:.1} %", ratio * 100.0),
                    threshold: format!("{:.1} %", max * 100.0),
                    crossed: alert,
                });
            }
            HealthRow {
                table,
                // NULL while another session holds or awaits a conflicting lock on it.
                size: r.get::<_, Option<i64>>(1).map_or_else(|| "locked".to_string(), bytes),
                live: thousands(r.get(2)),
                dead: thousands(r.get(3)),
                ratio: format!("{:.1} %", ratio * 100.0),
                alert,
                last_autovacuum: r.get(5),
            }
        })
        .collect();
    Ok((Some(health), oldest))
}

/// A signal for each history table due for truncation that other sessions' locks keep from it,
/// naming them (jq.history_tables(): nothing when the role may not call it). Each call is a
/// transaction of its own, so its locks end with it.
async fn history_signals(app: &AppRef, signals: &mut Vec<Signal>) -> Result<(), super::db::Error> {
    let callable = app.db.opt(crate::metrics::HISTORY_TABLES_CALLABLE, &[]).await?;
    if !callable.is_some_and(|r| r.get::<_, bool>(0)) {
        return Ok(());
    }
    let rows = app
        .db
        .rows(
            "SELECT table_name,
                    array_to_string(ARRAY(SELECT CASE WHEN p = 0 THEN 'a prepared transaction' ELSE 'pid ' || p END
                                          FROM unnest(truncation_blocked_by) p), ', ')
             FROM jq.history_tables() WHERE truncation_due AND cardinality(truncation_blocked_by) > 0",
            &[],
        )
        .await?;
    for r in rows {
        signals.push(Signal {
            name: format!("table {}: past retention, truncation blocked", r.get::<_, String>(0)),
            value: format!("by {}", r.get::<_, String>(1)),
            threshold: "no session".into(),
            crossed: true,
        });
    }
    Ok(())
}

/// GET / (with `fragment=1`: only the live part, for the 2 s refresh).
pub async fn page(State(app): State<AppRef>, Query(q): Query<HashMap<String, String>>) -> Response {
    let live = match live(&app).await {
        Ok(l) => l.render(),
        Err(e) => return Page::db(&app, &e),
    };
    live_page(q.contains_key("fragment"), live, |live| {
        Full { base: app.base.clone(), read_only: app.args.read_only, live }.render()
    })
}
