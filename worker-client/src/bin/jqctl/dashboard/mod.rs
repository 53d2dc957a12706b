//! `jqctl dashboard`: the operator web UI (docs/dashboard.md).
//!
//! Server-rendered HTML (askama templates, escaped by default) served by axum on jqctl's tokio
//! runtime. Every figure comes from jq's SQL read API (sql/observe.sql), called as the database
//! role jqctl connects as, so jq's grants decide what a page shows and which actions succeed;
//! the web layer adds only transport security (security.rs): loopback by default, an access
//! token off loopback, CSRF tokens on every POST, a read-only mode.
//!
//! One module per page (overview, queue, job, schedules, workers), actions.rs for the POSTs,
//! render.rs for formatting, charts and error pages, db.rs for the connection.

mod actions;
mod db;
mod job;
mod overview;
mod queue;
mod render;
mod schedules;
mod security;
mod workers;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use crate::{Cli, CliError, CliResult};

/// `jqctl dashboard` options.
#[derive(clap::Args, Debug, Clone)]
pub struct DashboardArgs {
    /// Address to listen on. A non-loopback address needs --token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Render no forms and answer every POST with 403.
    #[arg(long)]
    pub read_only: bool,
    /// Access token: requests must carry `Authorization: Bearer TOKEN` or the cookie the login
    /// form sets. Required when listening on a non-loopback address.
    #[arg(long, env = "JQ_DASHBOARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Path prefix the dashboard is served under (behind a reverse proxy), e.g. /jq.
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub base_path: String,
    /// Signal threshold: oldest claimable job older than this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub max_oldest_pending: f64,
    /// Signal threshold: claimable + scheduled jobs of a queue.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_depth: i64,
    /// Signal threshold: failed / (completed + failed) executions over the last 15 minutes, percent.
    #[arg(long, value_name = "PCT", default_value_t = 10.0)]
    pub max_failure_rate: f64,
    /// Signal threshold: dead tuples / all tuples of a jq table (table bloat), 0..1.
    #[arg(long, value_name = "RATIO", default_value_t = 0.2)]
    pub max_dead_ratio: f64,
    /// Depth counts stop at this many jobs per state ("10,000+"): the cost of a refresh does not
    /// grow with the queue.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub depth_cap: i32,
    /// Seconds each of the dashboard's queries may run (statement_timeout of its transaction,
    /// unless the role's own is stricter; 0 = no limit of jqctl's). A query waiting behind
    /// another session's lock on a jq table then fails with a 503 page instead of hanging; other
    /// requests use other connections meanwhile, and one that finds all of them busy waits for
    /// one at most this long (30 s with 0), then answers 503.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=2_147_483))]
    pub query_timeout: u32,
}

/// Shared by every handler.
pub struct App {
    pub db: db::Db,
    pub args: DashboardArgs,
    /// The normalised prefix: "" or "/something" (no trailing slash).
    pub base: String,
    /// The CSRF token every form carries (security.rs).
    pub csrf: String,
}

pub type AppRef = Arc<App>;

/// The normalised base path: "" or "/a/b".
fn normalise_base(b: &str) -> Result<String, CliError> {
    let t = b.trim_matches('/');
    if t.is_empty() {
        return Ok(String::new());
    }
    if !t.chars().all(|c| c.is_ascii_alphanumeric() || "-_./~".contains(c)) || t.contains("..") {
        return Err(CliError(format!("--base-path {b:?}: use letters, digits and - _ . / ~ only")));
    }
    Ok(format!("/{t}"))
}

/// The routes of the dashboard, relative to the base path (docs/dashboard.md, "Pages").
fn routes(app: AppRef) -> Router {
    let pages = Router::new()
        .route("/", get(overview::page))
        .route("/queues/{queue}", get(queue::page))
        .route("/jobs/{id}", get(job::page))
        .route("/schedules", get(schedules::page))
        .route("/workers", get(workers::page))
        .route("/jobs/{id}/{action}", post(actions::job))
        .route("/queues/{queue}/{action}", post(actions::queue))
        .route("/queues/{queue}/dead/{action}", post(actions::dead))
        .route("/schedules/{name}/{action}", post(actions::schedule))
        .route("/login", get(security::login_page).post(security::login))
        .route("/assets/{file}", get(render::asset))
        .fallback(render::not_found_handler);
    let routed = if app.base.is_empty() {
        pages
    } else {
        // The nested "/" answers BASE; BASE/ (the URL printed at start) is routed here.
        Router::new()
            .route(&format!("{}/", app.base), get(overview::page))
            .nest(&app.base, pages)
            .fallback(render::not_found_handler)
    };
    routed.layer(axum::middleware::from_fn_with_state(app.clone(), security::guard)).with_state(app)
}

/// Runs the dashboard until SIGINT/SIGTERM.
pub async fn run(cli: &Cli, args: &DashboardArgs) -> CliResult {
    let addr: SocketAddr = args
        .listen
        .parse()
        .map_err(|e| CliError(format!("--listen {:?}: {e} (give IP:PORT, e.g. 127.0.0.1:8080)", args.listen)))?;
    let token = args.token.clone().filter(|t| !t.is_empty());
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(CliError(format!(
            "refusing to listen on {addr} without an access token: give --token or JQ_DASHBOARD_TOKEN \
             (or listen on a loopback address)"
        )));
    }
    if args.depth_cap < 1 {
        return Err("--depth-cap must be at least 1".into());
    }
    let base = normalise_base(&args.base_path)?;
    let db = db::Db::connect(cli, args.query_timeout).await?;
    let mut args = args.clone();
    args.token = token;
    let app = Arc::new(App { db, args, base: base.clone(), csrf: security::random_hex(16)? });
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError(format!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr().map_err(|e| CliError(e.to_string()))?;
    println!("dashboard: http://{local}{base}/");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    axum::serve(listener, routes(app))
        .with_graceful_shutdown(shutdown())
        .await
        .map_err(|e| CliError(format!("dashboard server: {e}")))
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::normalise_base;

    #[test]
    fn base_paths_are_normalised_and_checked() {
        assert_eq!(normalise_base("").unwrap(), "");
        assert_eq!(normalise_base("/").unwrap(), "");
        assert_eq!(normalise_base("jq/").unwrap(), "/jq");
        assert_eq!(normalise_base("/ops/jq").unwrap(), "/ops/jq");
        assert!(normalise_base("/a\"b").is_err());
        assert!(normalise_base("/../x").is_err());
    }
}
