//! Transport security of the dashboard (docs/dashboard.md, "Security"). What a role may see and
//! do is jq's to decide (its grants, enforced inside the SQL functions); this module only makes
//! sure that the requests reaching them are the operator's:
//! * the access token (`--token`): `Authorization: Bearer TOKEN`, or the HttpOnly,
//!   SameSite=Strict cookie the login form sets; required off loopback (mod.rs refuses to start);
//! * CSRF: every POST form carries the process's random token in field `csrf`, compared in
//!   constant time ([`check_csrf`]); a POST whose Origin is another host is refused;
//! * read-only mode: every POST but the login answered 403;
//! * headers: a Content-Security-Policy without inline script, no framing, no sniffing, and
//!   `Server-Timing` (the bench reads it).
//!
//! Tested without a browser by worker-client/tests/dashboard.rs.

use std::collections::HashMap;
use std::io::Read;
use std::time::Instant;

use askama::Template;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Form;

use super::render::{html, Page};
use super::AppRef;
use crate::CliError;

/// The name of the cookie the login form sets.
const TOKEN_COOKIE: &str = "jq_dashboard_token";

/// `n` random bytes from the kernel, as hex.
pub fn random_hex(n: usize) -> Result<String, CliError> {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| CliError(format!("cannot read /dev/urandom: {e}")))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Equality whose time does not depend on where the inputs differ.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether the negative control `variant` (JQ_CLIENT_BREAK) is on: only in builds with the
/// feature `test-breaks`, never in one that serves (tests/dashboard.rs names the controls).
pub fn broken(variant: &str) -> bool {
    cfg!(feature = "test-breaks") && std::env::var("JQ_CLIENT_BREAK").is_ok_and(|v| v == variant)
}

/// Whether a form's `csrf` field is the process's token (negative control `dashboard_no_csrf`:
/// every form passes).
pub fn check_csrf(app: &AppRef, form: &HashMap<String, String>) -> bool {
    if broken("dashboard_no_csrf") {
        return true;
    }
    form.get("csrf").is_some_and(|t| ct_eq(t.as_bytes(), app.csrf.as_bytes()))
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).find_map(|v| {
        v.split(';').find_map(|kv| {
            let (k, val) = kv.trim().split_once('=')?;
            (k == name).then(|| val.to_string())
        })
    })
}

/// Whether the request carries the access token (always true without one).
fn authenticated(app: &AppRef, headers: &HeaderMap) -> bool {
    let Some(token) = app.args.token.as_deref() else { return true };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    bearer.or_else(|| cookie(headers, TOKEN_COOKIE)).is_some_and(|t| ct_eq(t.as_bytes(), token.as_bytes()))
}

/// A POST from a page of another origin (the browser says so in Origin): refused whatever it carries.
fn cross_origin(headers: &HeaderMap) -> bool {
    let (Some(origin), Some(host)) = (headers.get(header::ORIGIN), headers.get(header::HOST)) else {
        return false;
    };
    let origin = origin.to_str().unwrap_or("");
    let host = host.to_str().unwrap_or("");
    let origin_host = origin.split_once("://").map(|(_, h)| h).unwrap_or(origin);
    origin == "null" || origin_host != host
}

/// The middleware in front of every route: token, read-only, cross-origin POSTs, headers.
pub async fn guard(State(app): State<AppRef>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let full = req.uri().path();
    let path = full.strip_prefix(app.base.as_str()).unwrap_or(full).to_string();
    let open = path == "/login" || path.starts_with("/assets/");
    let post = req.method() == Method::POST;
    let mut resp = if !open && !authenticated(&app, req.headers()) {
        let mut r = login_form(&app, StatusCode::UNAUTHORIZED, "This dashboard needs its access token.");
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        r
    } else if post && cross_origin(req.headers()) {
        Page::error(&app, StatusCode::FORBIDDEN, "Refused: a form posted from another site.")
    } else if post && app.args.read_only && path != "/login" {
        Page::error(&app, StatusCode::FORBIDDEN, "Read-only dashboard: actions are disabled (--read-only).")
    } else {
        next.run(req).await
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !path.starts_with("/assets/") {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if let Ok(v) = HeaderValue::from_str(&format!("app;dur={ms:.2}")) {
        h.insert("server-timing", v);
    }
    resp
}

#[derive(Template)]
#[template(path = "login.html")]
struct Login<'a> {
    base: &'a str,
    csrf: &'a str,
    message: &'a str,
}

fn login_form(app: &AppRef, status: StatusCode, message: &str) -> Response {
    html(status, Login { base: &app.base, csrf: &app.csrf, message }.render())
}

/// GET /login: the token form.
pub async fn login_page(State(app): State<AppRef>) -> Response {
    let msg = if app.args.token.is_some() { "Enter the dashboard's access token." } else { "This dashboard needs no token." };
    login_form(&app, StatusCode::OK, msg)
}

/// POST /login: sets the token cookie when the token is right.
pub async fn login(State(app): State<AppRef>, Form(form): Form<HashMap<String, String>>) -> Response {
    let Some(token) = app.args.token.as_deref() else {
        return super::render::see_other(&app, "/");
    };
    let given = form.get("token").map(String::as_str).unwrap_or("");
    if !check_csrf(&app, &form) || !ct_eq(given.as_bytes(), token.as_bytes()) {
        return login_form(&app, StatusCode::UNAUTHORIZED, "Wrong token.");
    }
    let mut r = super::render::see_other(&app, "/");
    let path = if app.base.is_empty() { "/".to_string() } else { format!("{}/", app.base) };
    if let Ok(v) = HeaderValue::from_str(&format!("{TOKEN_COOKIE}={given}; Path={path}; HttpOnly; SameSite=Strict")) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_equality() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }

    #[test]
    fn cross_origin_posts_are_recognised() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(!cross_origin(&h), "no Origin: not a browser's cross-site POST");
        h.insert(header::ORIGIN, HeaderValue::from_static("http://127.0.0.1:8080"));
        assert!(!cross_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("http://evil.example"));
        assert!(cross_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(cross_origin(&h));
    }

    #[test]
    fn cookies_are_read_by_name() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; jq_dashboard_token=xyz; b=2"));
        assert_eq!(cookie(&h, TOKEN_COOKIE).as_deref(), Some("xyz"));
        assert_eq!(cookie(&h, "c"), None);
    }
}
