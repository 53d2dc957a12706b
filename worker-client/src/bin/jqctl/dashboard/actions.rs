//! The POST actions. Each checks the CSRF token (security.rs), calls jq's own function as the
//! dashboard's role — jq.retry, jq.cancel, jq.expire_lease, jq.pause, jq.resume,
//! jq.retry_dead, jq.cancel_dead, jq.alter_schedule — and answers 303 back to the page. jq
//! decides whether the role may: its 42501 becomes a 403 page with jq's message.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Form;
use tokio_postgres::types::Type;

use super::queue::enc;
use super::render::{see_other, Page};
use super::security::check_csrf;
use super::AppRef;

type Fields = HashMap<String, String>;

/// The page to return to: the form's `back` when it is a path of this dashboard, else `default`.
fn back(form: &Fields, default: String) -> String {
    match form.get("back") {
        Some(b) if b.starts_with('/') && !b.starts_with("//") && !b.contains('\\') => b.clone(),
        _ => default,
    }
}

fn csrf_refused(app: &AppRef) -> Response {
    Page::error(app, StatusCode::FORBIDDEN, "Refused: the form's CSRF token is missing or stale; reload the page and try again.")
}

/// Runs one statement with the given parameters; the redirect, or the error page.
async fn act(app: &AppRef, sql: &str, params: &[super::db::Param<'_>], to: String) -> Response {
    match app.db.rows(sql, params).await {
        Ok(_) => see_other(app, &to),
        Err(e) => Page::db(app, &e),
    }
}

/// POST /jobs/{id}/{retry|cancel|take-back}.
pub async fn job(State(app): State<AppRef>, Path((id, action)): Path<(String, String)>, Form(form): Form<Fields>) -> Response {
    if !check_csrf(&app, &form) {
        return csrf_refused(&app);
    }
    let Ok(id) = id.parse::<i64>() else { return Page::not_found(&app) };
    let sql = match action.as_str() {
        "retry" => "SELECT jq.retry($1)",
        "cancel" => "SELECT jq.cancel($1)",
        "take-back" => "SELECT jq.expire_lease($1)",
        _ => return Page::not_found(&app),
    };
    let to = back(&form, format!("/jobs/{id}"));
    act(&app, sql, &[(&id, Type::INT8)], to).await
}

/// POST /queues/{queue}/{pause|resume}.
pub async fn queue(State(app): State<AppRef>, Path((queue, action)): Path<(String, String)>, Form(form): Form<Fields>) -> Response {
    if !check_csrf(&app, &form) {
        return csrf_refused(&app);
    }
    let sql = match action.as_str() {
        "pause" => "SELECT jq.pause($1)",
        "resume" => "SELECT jq.resume($1)",
        _ => return Page::not_found(&app),
    };
    let to = back(&form, format!("/queues/{}", enc(&queue)));
    act(&app, sql, &[(&queue, Type::TEXT)], to).await
}

/// POST /queues/{queue}/dead/{retry|cancel}: the dead jobs matching the form's kind, key and
/// error filters, up to 1,000 per call (jq.retry_dead / jq.cancel_dead).
pub async fn dead(State(app): State<AppRef>, Path((queue, action)): Path<(String, String)>, Form(form): Form<Fields>) -> Response {
    if !check_csrf(&app, &form) {
        return csrf_refused(&app);
    }
    let sql = match action.as_str() {
        "retry" => "SELECT jq.retry_dead($1, $2, $3, $4)",
        "cancel" => "SELECT jq.cancel_dead($1, $2, $3, $4)",
        _ => return Page::not_found(&app),
    };
    let f = |k: &str| form.get(k).map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    let (kind, key, error) = (f("kind"), f("key"), f("error"));
    let to = back(&form, format!("/queues/{}?state=dead", enc(&queue)));
    act(&app, sql, &[(&queue, Type::TEXT), (&kind, Type::TEXT), (&key, Type::TEXT), (&error, Type::TEXT)], to).await
}

/// POST /schedules/{name}/{enable|disable} (jq.alter_schedule).
pub async fn schedule(State(app): State<AppRef>, Path((name, action)): Path<(String, String)>, Form(form): Form<Fields>) -> Response {
    if !check_csrf(&app, &form) {
        return csrf_refused(&app);
    }
    let enabled = match action.as_str() {
        "enable" => true,
        "disable" => false,
        _ => return Page::not_found(&app),
    };
    let to = back(&form, "/schedules".into());
    act(&app, "SELECT 1 FROM jq.alter_schedule($1, enabled => $2)", &[(&name, Type::TEXT), (&enabled, Type::BOOL)], to).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_stays_on_this_dashboard() {
        let mut f = Fields::new();
        assert_eq!(back(&f, "/d".into()), "/d");
        f.insert("back".into(), "/queues/a?state=dead".into());
        assert_eq!(back(&f, "/d".into()), "/queues/a?state=dead");
        for evil in ["//evil.example/x", "https://evil.example/", "/\\evil.example"] {
            f.insert("back".into(), evil.into());
            assert_eq!(back(&f, "/d".into()), "/d", "{evil}");
        }
    }
}
