//! Rendering helpers shared by the pages: responses, error pages, redirects, the embedded
//! assets, number and age formatting, and the inline SVG sparklines (numbers only, no text from
//! the database, so they are inserted unescaped).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::AppRef;

/// A rendered template as an HTML response (a 500 page if rendering failed).
pub fn html(status: StatusCode, body: Result<String, askama::Error>) -> Response {
    match body {
        Ok(b) => {
            let mut r = (status, b).into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
            r
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("template error: {e}")).into_response(),
    }
}

/// A page with a live part (overview, schedules, workers): the live part alone for its 2 s
/// refresh (`?fragment=1`), else the whole page that `full` wraps around it.
pub fn live_page(
    fragment: bool,
    live: Result<String, askama::Error>,
    full: impl FnOnce(String) -> Result<String, askama::Error>,
) -> Response {
    if fragment {
        return html(StatusCode::OK, live);
    }
    html(StatusCode::OK, live.and_then(full))
}

/// 303 to `path` under the base path.
pub fn see_other(app: &AppRef, path: &str) -> Response {
    let to = format!("{}{}", app.base, path);
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(&to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    base: &'a str,
    read_only: bool,
    status: u16,
    message: &'a str,
}

/// Error pages.
pub struct Page;

impl Page {
    /// A page saying `message` with `status`.
    pub fn error(app: &AppRef, status: StatusCode, message: &str) -> Response {
        html(status, ErrorPage { base: &app.base, read_only: app.args.read_only, status: status.as_u16(), message }.render())
    }

    /// The 404 page: the same for "does not exist" and "not visible to this role".
    pub fn not_found(app: &AppRef) -> Response {
        Page::error(app, StatusCode::NOT_FOUND, "Not found, or not visible to this role.")
    }

    /// A database error: 42501 (jq refused the role) as 403 with jq's message, 22xxx / 42704
    /// (bad input, unknown object) as 400; 57014 (cancelled: most often the query ran past its
    /// statement timeout behind another session's lock), a connection lost or refused (class 08,
    /// 57P01..57P03: terminated, shutting down, starting up) and no connection as 503: worth
    /// trying again; anything else 500.
    pub fn db(app: &AppRef, e: &super::db::Error) -> Response {
        let mut msg = e.describe();
        let status = match e.code() {
            Some("42501") => StatusCode::FORBIDDEN,
            Some(c) if c.starts_with("22") || c == "42704" || c == "23505" => StatusCode::BAD_REQUEST,
            Some("57014") => {
                msg = format!(
                    "{msg}: the query was cancelled, most often because it ran longer than its statement \
                     timeout (--query-timeout, {} s, or the role's or database's own when stricter) waiting \
                     for a lock another session holds on a jq table (see pg_locks); try again once it is released",
                    app.args.query_timeout
                );
                StatusCode::SERVICE_UNAVAILABLE
            }
            Some(c) if c.starts_with("08") || ["57P01", "57P02", "57P03"].contains(&c) => StatusCode::SERVICE_UNAVAILABLE,
            None if e.unavailable() => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Page::error(app, status, &msg)
    }
}

/// Router fallback: unknown URL.
pub async fn not_found_handler(State(app): State<AppRef>) -> Response {
    Page::not_found(&app)
}

/// GET /assets/{file}: the stylesheet and script, compiled into the binary.
pub async fn asset(State(app): State<AppRef>, Path(file): Path<String>) -> Response {
    let (body, ty) = match file.as_str() {
        "dashboard.css" => (include_str!("assets/dashboard.css"), "text/css; charset=utf-8"),
        "dashboard.js" => (include_str!("assets/dashboard.js"), "text/javascript; charset=utf-8"),
        _ => return Page::not_found(&app),
    };
    let mut r = body.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ty));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    r
}

/// `1,234,567`.
pub fn thousands(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A capped count (jq.overview counts at most cap + 1): "10,000+" past the cap.
pub fn capped(n: i64, cap: i32) -> String {
    if n > cap as i64 {
        format!("{}+", thousands(cap as i64))
    } else {
        thousands(n)
    }
}

/// Seconds as a short age: "42 s", "5 min 3 s", "2 h 10 min", "3 d 4 h".
pub fn age(secs: f64) -> String {
    if !secs.is_finite() {
        return "-".into();
    }
    let s = secs.max(0.0);
    if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 60.0 {
        format!("{} s", s as i64)
    } else if s < 3600.0 {
        format!("{} min {} s", (s / 60.0) as i64, (s % 60.0) as i64)
    } else if s < 86400.0 {
        format!("{} h {} min", (s / 3600.0) as i64, ((s % 3600.0) / 60.0) as i64)
    } else {
        format!("{} d {} h", (s / 86400.0) as i64, ((s % 86400.0) / 3600.0) as i64)
    }
}

/// Bytes as "12.3 MB".
pub fn bytes(b: i64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1000.0 && i < units.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[i])
    }
}

/// One series of a sparkline: values (oldest first) and its CSS class.
pub struct Series<'a> {
    pub values: &'a [f64],
    pub class: &'a str,
}

/// An inline SVG line chart of the series on one scale (0 .. the largest value), `w` x `h`
/// pixels, with the maximum as its title. Only numbers and fixed class names go in.
pub fn sparkline(series: &[Series], w: u32, h: u32, title: &str) -> String {
    let max = series.iter().flat_map(|s| s.values.iter().copied()).fold(0.0f64, f64::max);
    let mut out = format!(
        "<svg class=\"spark\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{t}\"><title>{t}</title>",
        t = escape_attr(title)
    );
    for s in series {
        let n = s.values.len();
        if n == 0 {
            continue;
        }
        let step = if n > 1 { (w as f64 - 2.0) / (n - 1) as f64 } else { 0.0 };
        let pts: Vec<String> = s
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let y = if max > 0.0 { (h as f64 - 2.0) - (v / max) * (h as f64 - 4.0) } else { h as f64 - 2.0 };
                format!("{:.1},{:.1}", 1.0 + i as f64 * step, y)
            })
            .collect();
        out.push_str(&format!("<polyline class=\"{}\" fill=\"none\" points=\"{}\"/>", s.class, pts.join(" ")));
    }
    out.push_str("</svg>");
    out
}

/// Escapes text for an HTML attribute or text node (for the few strings built outside templates).
pub fn escape_attr(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// A signal (docs/observability.md's alerts): a value, its threshold, and whether it is crossed.
pub struct Signal {
    pub name: String,
    pub value: String,
    pub threshold: String,
    pub crossed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_ages_and_bytes() {
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(capped(10001, 10000), "10,000+");
        assert_eq!(capped(10000, 10000), "10,000");
        assert_eq!(age(3.25), "3.2 s");
        assert_eq!(age(125.0), "2 min 5 s");
        assert_eq!(age(7322.0), "2 h 2 min");
        assert_eq!(bytes(1_500_000), "1.5 MB");
    }

    #[test]
    fn sparklines_hold_numbers_only() {
        let v = [0.0, 2.0, 1.0];
        let svg = sparkline(&[Series { values: &v, class: "completed" }], 100, 20, "max <2>");
        assert!(svg.starts_with("<svg") && svg.contains("polyline") && svg.contains("max &lt;2&gt;"));
    }
}
