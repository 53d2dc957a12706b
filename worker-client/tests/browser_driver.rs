//! The browser driver (tests/common/browser.rs) on its own, against a tiny HTTP server in this
//! test: navigation and load waits, selectors, text and attributes, a form POST followed through
//! its 303 redirect, the status of a 404, a PNG screenshot, dialog detection, and that Chromium
//! and its children are gone after drop. The dashboard's tests (dashboard_browser.rs) rely on
//! each of these.
//!
//! The dialog check has its own control here: the same `<script>` payload served unescaped
//! (`/raw`) must be seen executing (a dialog, the title changed, the global set), so "no dialog"
//! on the escaped page (`/escaped`) means the payload did not run, not that the driver is blind.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::browser::{output_dir, Browser};

const LIMIT: Duration = Duration::from_secs(20);

/// The script payload: it opens an alert, changes the title and sets a global when it runs.
const PAYLOAD: &str = "<script>document.title='pwned';window.__pwned=1;alert('xss')</script>";

/// A minimal HTTP/1.1 server on a free loopback port (one thread per connection, every
/// response `Connection: close`); records the bodies of POST requests.
struct TestServer {
    port: u16,
    posts: Arc<Mutex<Vec<String>>>,
}

impl TestServer {
    fn start() -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let posts = Arc::new(Mutex::new(Vec::new()));
        let p = posts.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let p = p.clone();
                std::thread::spawn(move || serve(conn, &p));
            }
        });
        TestServer { port, posts }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

fn serve(conn: TcpStream, posts: &Mutex<Vec<String>>) {
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return; // a preconnect that never sent a request
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    let _ = r.read_exact(&mut body);
    let (status, extra, html) = route(&method, &path, String::from_utf8_lossy(&body).into_owned(), posts);
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{html}",
        html.len()
    );
    let _ = (&conn).write_all(resp.as_bytes());
}

fn page(title: &str, body: &str) -> String {
    format!("<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>")
}

fn route(method: &str, path: &str, body: String, posts: &Mutex<Vec<String>>) -> (&'static str, String, String) {
    let escaped = PAYLOAD.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    match (method, path) {
        ("GET", "/") => ("200 OK", String::new(), page(
            "home",
            "<main data-page=\"test\"><h1 id=\"h\">Hello <b>driver</b></h1>\
             <table><tr data-job-id=\"1\" data-state=\"dead\"><td>1</td></tr>\
             <tr data-job-id=\"2\" data-state=\"ready\"><td>2</td></tr></table>\
             <form method=\"post\" action=\"/submit\"><input type=\"hidden\" name=\"csrf\" value=\"tok\">\
             <button data-action=\"retry\">Retry</button></form><div id=\"later\"></div></main>\
             <script>window.addLate = () => setTimeout(() => { document.getElementById('later').innerHTML = \
             '<span class=\"late\" data-x=\"7\">late</span>'; }, 300);</script>",
        )),
        ("POST", "/submit") => {
            posts.lock().unwrap().push(body);
            ("303 See Other", "Location: /done\r\n".into(), String::new())
        }
        ("GET", "/done") => ("200 OK", String::new(), page("done", "<main data-page=\"done\">done</main>")),
        ("GET", "/escaped") => ("200 OK", String::new(), page("job", &format!("<pre data-field=\"payload\">{escaped}</pre>"))),
        ("GET", "/raw") => ("200 OK", String::new(), page("job", &format!("<pre data-field=\"payload\">{PAYLOAD}</pre>"))),
        _ => ("404 Not Found", String::new(), page("not found", "<main data-page=\"404\">not found</main>")),
    }
}

#[test]
fn the_driver_navigates_reads_submits_and_screenshots() {
    let out = output_dir("browser_driver");
    let Some(mut b) = Browser::launch(&out) else { return };
    let srv = TestServer::start();

    b.goto(&srv.url("/"), LIMIT);
    assert_eq!(b.status(), Some(200));
    assert_eq!(b.attr("main", "data-page").as_deref(), Some("test"));
    assert_eq!(b.text("#h").as_deref(), Some("Hello driver"));
    assert_eq!(b.attrs("tr[data-job-id]", "data-state"), ["dead", "ready"]);
    assert_eq!(b.count("tr[data-job-id]"), 2);
    // The late element comes 300 ms after the test asks for it (not after load: a loaded machine
    // could spend that long on the reads above), so the driver's wait has something to wait for.
    assert!(!b.exists(".late"), "the late element is added only once the test calls addLate()");
    b.eval("addLate()");
    b.wait_for(".late", LIMIT);
    assert_eq!(b.attr(".late", "data-x").as_deref(), Some("7"));
    b.wait_js("document.title === 'home'", LIMIT);

    let shot = out.join("home.png");
    b.screenshot(&shot);
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 1000, "screenshot {} is not a real PNG", shot.display());

    b.click_and_wait("button[data-action=retry]", LIMIT);
    assert_eq!(b.url(), srv.url("/done"), "the browser followed the 303");
    assert_eq!(b.status(), Some(200));
    assert_eq!(b.attr("main", "data-page").as_deref(), Some("done"));
    assert_eq!(*srv.posts.lock().unwrap(), ["csrf=tok"], "the form was posted once, with its field");

    b.goto(&srv.url("/nowhere"), LIMIT);
    assert_eq!(b.status(), Some(404));
    assert!(b.body_text().contains("not found"));
    assert!(b.js_errors().is_empty(), "no page threw: {:?}", b.js_errors());
}

#[test]
fn the_driver_sees_a_script_payload_run_only_when_unescaped() {
    let out = output_dir("browser_driver_dialogs");
    let Some(mut b) = Browser::launch(&out) else { return };
    let srv = TestServer::start();

    b.goto(&srv.url("/escaped"), LIMIT);
    assert_eq!(b.text("pre[data-field=payload]").as_deref(), Some(PAYLOAD), "the payload shows as text");
    assert!(b.dialogs().is_empty(), "no dialog: {:?}", b.dialogs());
    assert_eq!(b.eval("document.title"), "job");
    assert_eq!(b.eval("typeof window.__pwned"), "undefined");
    assert_eq!(b.count("pre[data-field=payload] script"), 0);

    // The control: the same payload unescaped runs, and the driver sees each of its effects.
    b.goto(&srv.url("/raw"), LIMIT);
    let dialogs = b.dialogs();
    assert_eq!(dialogs.len(), 1, "{dialogs:?}");
    assert_eq!((dialogs[0].kind.as_str(), dialogs[0].message.as_str()), ("alert", "xss"));
    assert_eq!(b.eval("document.title"), "pwned");
    assert_eq!(b.eval("window.__pwned"), 1);
}

#[test]
fn dropping_the_browser_kills_chromium_and_its_children() {
    let out = output_dir("browser_driver_drop");
    let Some(mut b) = Browser::launch(&out) else { return };
    b.goto("about:blank", LIMIT);
    let pgid = b.pid();
    let members = || {
        let o = std::process::Command::new("pgrep").args(["-g", &pgid.to_string()]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).lines().count()
    };
    assert!(members() > 1, "Chromium runs several processes in its group");
    drop(b);
    common::wait_until(Duration::from_secs(10), "Chromium's process group is empty", || members() == 0);
}
