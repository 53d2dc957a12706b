//! A headless Chromium for the dashboard's browser tests (tests/dashboard_browser.rs, and the
//! driver's own test tests/browser_driver.rs): Debian's `chromium` package driven over the
//! Chrome DevTools Protocol (CDP) on a WebSocket.
//!
//! Why an own small CDP client and not a CDP crate: the tests need a dozen commands (navigate,
//! evaluate, screenshot, dialog events). `headless_chrome` (MSRV 1.85, fine for rustc 1.95,
//! and its default features never download a browser) generates Rust types for the whole
//! protocol at build time — a large compile on a two-core machine for every test build — and
//! pulls in anyhow, regex, derive_builder, url, which, tempfile and more; `chromiumoxide` is
//! async and heavier still. This file speaks the protocol's JSON directly over `tungstenite`
//! (a maintained, synchronous WebSocket crate with few dependencies), about 300 lines.
//!
//! How Chromium runs: `--headless=new --disable-gpu` (no display, no GPU on a test machine),
//! `--remote-debugging-port=0` (Chromium picks a free port and writes it to `DevToolsActivePort`
//! in the profile directory, so parallel tests never collide), a fresh `--user-data-dir` under
//! the test's output folder. As root (CI runs as root) Chromium refuses to start without
//! `--no-sandbox`: its sandbox needs an unprivileged user. The pages it loads are the test's own
//! servers on 127.0.0.1, so the sandbox protects nothing here; as another user it keeps its
//! sandbox. Chromium runs in a process group of its own, killed whole (SIGKILL: the browser, its
//! zygote, renderers and GPU process) on drop.
//!
//! When `chromium` is not installed the tests skip loudly, unless the environment variable `CI`
//! is set (.ci/run sets it; .ci/setup installs chromium): then they fail. `JQ_CHROMIUM` names
//! another binary.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

/// Where Debian's package installs it.
const CHROMIUM: &str = "/usr/bin/chromium";

/// How long one protocol command may take before the test fails.
const COMMAND_LIMIT: Duration = Duration::from_secs(30);

/// The folder a test writes its screenshots and browser logs to: `$JQ_TEST_OUTPUT/<test>` or
/// `target/dashboard-screenshots/<test>` in the workspace; created empty.
pub fn output_dir(test: &str) -> PathBuf {
    let base = match std::env::var("JQ_TEST_OUTPUT").ok().filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dashboard-screenshots"),
    };
    let d = base.join(test);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A dialog (`alert`, `confirm`, `prompt`, `beforeunload`) a page opened; the driver accepts it
/// at once so the page does not block.
#[derive(Debug, Clone)]
pub struct Dialog {
    pub kind: String,
    pub message: String,
    pub url: String,
}

/// One headless Chromium with one page (tab) attached; killed with its children on drop.
pub struct Browser {
    child: Child,
    ws: WebSocket<TcpStream>,
    session: String,
    next_id: u64,
    profile: PathBuf,
    /// `Page.loadEventFired` events seen so far (a navigation is done when this grows).
    loads: u64,
    /// HTTP status of the last main-document response.
    document_status: Option<u16>,
    dialogs: Vec<Dialog>,
    /// Uncaught JavaScript exceptions (`Runtime.exceptionThrown`), as text.
    js_errors: Vec<String>,
}

impl Browser {
    /// Starts Chromium with a fresh profile under `out` and opens a blank page; `None` (after
    /// saying so on stderr) when chromium is missing outside CI.
    pub fn launch(out: &Path) -> Option<Browser> {
        let bin = std::env::var("JQ_CHROMIUM").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| CHROMIUM.into());
        if !Path::new(&bin).exists() {
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty());
            assert!(!ci, "{bin} is missing, and CI is set: .ci/setup installs the chromium package");
            eprintln!("SKIPPED: {bin} is missing (apt-get install chromium, or run .ci/setup); browser test not run");
            return None;
        }
        let profile = out.join(format!("chromium-profile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).unwrap();
        let child = spawn_chromium(&bin, &profile, &out.join("chromium.log"));
        let ws_url = wait_devtools_url(&profile, &out.join("chromium.log"));
        let stream = connect_stream(&ws_url);
        let (ws, _) = tungstenite::client(ws_url.as_str(), stream).expect("WebSocket handshake with Chromium");
        let mut b = Browser {
            child,
            ws,
            session: String::new(),
            next_id: 0,
            profile,
            loads: 0,
            document_status: None,
            dialogs: Vec::new(),
            js_errors: Vec::new(),
        };
        b.attach_page();
        Some(b)
    }

    /// Creates a tab and attaches to it (flat session mode: the page's commands carry its
    /// `sessionId` on the browser's one WebSocket), then enables the events the driver reads.
    fn attach_page(&mut self) {
        let target = self.browser_call("Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].as_str().expect("targetId").to_string();
        let att = self.browser_call("Target.attachToTarget", json!({"targetId": target_id, "flatten": true}));
        self.session = att["sessionId"].as_str().expect("sessionId").to_string();
        for domain in ["Page.enable", "Runtime.enable", "Network.enable"] {
            self.call(domain, json!({}));
        }
        self.call("Emulation.setDeviceMetricsOverride", json!({"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}));
    }

    /// The browser process's id (also its process group's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Opens `url` and waits (up to `limit`) until its load event fired.
    pub fn goto(&mut self, url: &str, limit: Duration) {
        let before = self.loads;
        self.document_status = None;
        let r = self.call("Page.navigate", json!({"url": url}));
        if let Some(e) = r.get("errorText").and_then(Value::as_str) {
            panic!("navigating to {url}: {e}");
        }
        self.wait_loaded(before, limit, &format!("the page {url} loaded"));
    }

    /// Clicks the first element matching `selector` (a form's button: the browser submits the
    /// form, follows the redirect) and waits until the next page has loaded.
    pub fn click_and_wait(&mut self, selector: &str, limit: Duration) {
        let before = self.loads;
        self.document_status = None;
        self.click(selector);
        self.wait_loaded(before, limit, &format!("the page after clicking {selector} loaded"));
    }

    /// Clicks the first element matching `selector` (panics if there is none).
    pub fn click(&mut self, selector: &str) {
        let found = self.eval(&format!(
            "(() => {{ const e = document.querySelector({s}); if (!e) return false; e.click(); return true; }})()",
            s = js_str(selector)
        ));
        assert_eq!(found, Value::Bool(true), "no element matches {selector} on {}", self.url());
    }

    /// Waits until `document.readyState` is complete and the load counter moved past `before`.
    fn wait_loaded(&mut self, before: u64, limit: Duration, what: &str) {
        let deadline = Instant::now() + limit;
        while self.loads <= before {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "timed out after {limit:?} waiting for: {what}");
            self.pump(left.min(Duration::from_millis(200)));
        }
    }

    /// Waits up to `limit` until the JavaScript expression `expr` is truthy on the page;
    /// on time-out saves a screenshot `timeout.png` beside the profile and panics with the URL.
    pub fn wait_js(&mut self, expr: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            // An error (the page is between documents) counts as not yet.
            if self.try_eval(&format!("!!({expr})")).is_ok_and(|v| truthy(&v)) {
                return;
            }
            if Instant::now() >= deadline {
                let shot = self.profile.with_file_name("timeout.png");
                self.screenshot(&shot);
                panic!("timed out after {limit:?} on {} waiting for `{expr}` (screenshot {})", self.url(), shot.display());
            }
            self.pump(Duration::from_millis(100));
        }
    }

    /// Waits up to `limit` until an element matches the CSS selector.
    pub fn wait_for(&mut self, selector: &str, limit: Duration) {
        self.wait_js(&format!("document.querySelector({})", js_str(selector)), limit);
    }

    /// Whether an element matches the CSS selector now.
    pub fn exists(&mut self, selector: &str) -> bool {
        truthy(&self.eval(&format!("!!document.querySelector({})", js_str(selector))))
    }

    /// How many elements match the CSS selector now.
    pub fn count(&mut self, selector: &str) -> usize {
        self.eval(&format!("document.querySelectorAll({}).length", js_str(selector))).as_u64().unwrap() as usize
    }

    /// The `textContent` of the first element matching `selector`, if any.
    pub fn text(&mut self, selector: &str) -> Option<String> {
        let v = self.eval(&format!("(e => e ? e.textContent : null)(document.querySelector({}))", js_str(selector)));
        v.as_str().map(str::to_string)
    }

    /// Attribute `name` of the first element matching `selector`, if both exist.
    pub fn attr(&mut self, selector: &str, name: &str) -> Option<String> {
        let v = self.eval(&format!(
            "(e => e ? e.getAttribute({n}) : null)(document.querySelector({s}))",
            s = js_str(selector),
            n = js_str(name)
        ));
        v.as_str().map(str::to_string)
    }

    /// Attribute `name` of every element matching `selector` (elements without it skipped).
    pub fn attrs(&mut self, selector: &str, name: &str) -> Vec<String> {
        let v = self.eval(&format!(
            "Array.from(document.querySelectorAll({s}), e => e.getAttribute({n})).filter(a => a !== null)",
            s = js_str(selector),
            n = js_str(name)
        ));
        v.as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
    }

    /// The visible text of the whole page (`document.body.innerText`).
    pub fn body_text(&mut self) -> String {
        self.eval("document.body ? document.body.innerText : ''").as_str().unwrap_or_default().to_string()
    }

    /// The page's current URL.
    pub fn url(&mut self) -> String {
        self.eval("location.href").as_str().unwrap_or_default().to_string()
    }

    /// HTTP status of the last main-document response (after [`Browser::goto`] or
    /// [`Browser::click_and_wait`]: the final one after redirects).
    pub fn status(&self) -> Option<u16> {
        self.document_status
    }

    /// Dialogs opened so far (each was accepted at once).
    pub fn dialogs(&mut self) -> Vec<Dialog> {
        self.pump(Duration::ZERO);
        self.dialogs.clone()
    }

    /// Uncaught JavaScript exceptions so far.
    pub fn js_errors(&mut self) -> Vec<String> {
        self.pump(Duration::ZERO);
        self.js_errors.clone()
    }

    /// Evaluates a JavaScript expression on the page (promises awaited) and returns its value
    /// as JSON; panics when it throws.
    pub fn eval(&mut self, expr: &str) -> Value {
        self.try_eval(expr).unwrap_or_else(|e| panic!("JavaScript `{expr}`: {e}"))
    }

    /// As [`Browser::eval`], with the exception (or the protocol error: no page context while a
    /// navigation is under way) as an error.
    pub fn try_eval(&mut self, expr: &str) -> Result<Value, String> {
        let session = self.session.clone();
        let params = json!({"expression": expr, "returnByValue": true, "awaitPromise": true});
        let r = self.send_and_wait("Runtime.evaluate", params, Some(&session))?;
        match r.get("exceptionDetails") {
            Some(ex) => Err(format!("threw {ex}")),
            None => Ok(r["result"].get("value").cloned().unwrap_or(Value::Null)),
        }
    }

    /// Writes a PNG of the whole page (beyond the 1280×900 viewport when it is longer) to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let m = self.call("Page.getLayoutMetrics", json!({}));
        let size = &m["cssContentSize"];
        let (w, h) = (size["width"].as_f64().unwrap_or(1280.0), size["height"].as_f64().unwrap_or(900.0));
        let clip = json!({"x": 0, "y": 0, "width": w.max(1280.0), "height": h.clamp(1.0, 10_000.0), "scale": 1});
        let r = self.call("Page.captureScreenshot", json!({"format": "png", "captureBeyondViewport": true, "clip": clip}));
        let png = base64::engine::general_purpose::STANDARD.decode(r["data"].as_str().expect("screenshot data")).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "Chromium's screenshot is not a PNG");
        std::fs::write(path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    /// A command to the attached page; its `result` (panics when Chromium answers an error).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send_and_wait(method, params, Some(&session)).unwrap_or_else(|e| panic!("CDP {method} failed: {e}"))
    }

    /// A command to the browser itself (no session).
    fn browser_call(&mut self, method: &str, params: Value) -> Value {
        self.send_and_wait(method, params, None).unwrap_or_else(|e| panic!("CDP {method} failed: {e}"))
    }

    /// Sends one command and handles events until its answer: `result`, or the error text.
    fn send_and_wait(&mut self, method: &str, params: Value, session: Option<&str>) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws.send(Message::text(msg.to_string())).unwrap_or_else(|e| panic!("CDP {method}: {e}"));
        let deadline = Instant::now() + COMMAND_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "CDP {method}: no answer from Chromium within {COMMAND_LIMIT:?}");
            let Some(m) = self.read(left) else { continue };
            if m["id"].as_u64() == Some(id) {
                return match m.get("error") {
                    Some(e) => Err(e.to_string()),
                    None => Ok(m["result"].clone()),
                };
            }
            self.on_message(&m);
        }
    }

    /// Handles the events that arrive within `wait` (none when zero; returns at the first
    /// quiet moment after that).
    fn pump(&mut self, wait: Duration) {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read(left.max(Duration::from_millis(1))) {
                Some(m) => self.on_message(&m),
                None if left.is_zero() => return,
                None => {}
            }
            if Instant::now() >= deadline {
                return;
            }
        }
    }

    /// One message within `wait`, or None when nothing arrived.
    fn read(&mut self, wait: Duration) -> Option<Value> {
        self.ws.get_mut().set_read_timeout(Some(wait.max(Duration::from_millis(1)))).unwrap();
        match self.ws.read() {
            Ok(Message::Text(t)) => Some(serde_json::from_str(t.as_str()).expect("CDP message is JSON")),
            Ok(_) => None,
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                None
            }
            Err(e) => panic!("Chromium's DevTools connection failed: {e} (log: {})", self.log_path().display()),
        }
    }

    /// Records the events the driver tracks; accepts dialogs so the page goes on.
    fn on_message(&mut self, m: &Value) {
        let p = &m["params"];
        match m["method"].as_str().unwrap_or_default() {
            "Page.loadEventFired" => self.loads += 1,
            "Network.responseReceived" if p["type"] == "Document" => {
                self.document_status = p["response"]["status"].as_u64().map(|s| s as u16);
            }
            "Page.javascriptDialogOpening" => {
                self.dialogs.push(Dialog {
                    kind: p["type"].as_str().unwrap_or_default().into(),
                    message: p["message"].as_str().unwrap_or_default().into(),
                    url: p["url"].as_str().unwrap_or_default().into(),
                });
                // Not awaited: the answer comes with an id nobody waits for and is ignored.
                self.next_id += 1;
                let msg = json!({"id": self.next_id, "method": "Page.handleJavaScriptDialog",
                                 "params": {"accept": true}, "sessionId": self.session});
                let _ = self.ws.send(Message::text(msg.to_string()));
            }
            "Runtime.exceptionThrown" => self.js_errors.push(p["exceptionDetails"].to_string()),
            _ => {}
        }
    }

    fn log_path(&self) -> PathBuf {
        self.profile.with_file_name("chromium.log")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole process group: Chromium's zygote and renderers do not die with the browser
        // process when it is SIGKILLed.
        let pgid = self.child.id();
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pgid}")]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.profile);
        }
    }
}

/// Starts Chromium in a process group of its own, logging to `log`.
fn spawn_chromium(bin: &str, profile: &Path, log: &Path) -> Child {
    use std::os::unix::process::CommandExt;
    let as_root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let mut cmd = Command::new(bin);
    cmd.args(["--headless=new", "--disable-gpu", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args([
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--mute-audio",
            "--hide-scrollbars",
            "--window-size=1280,900",
        ]);
    if as_root {
        cmd.arg("--no-sandbox");
    }
    cmd.arg("about:blank");
    let f = std::fs::File::create(log).unwrap();
    cmd.stdin(Stdio::null()).stdout(f.try_clone().unwrap()).stderr(f).process_group(0);
    cmd.spawn().unwrap_or_else(|e| panic!("starting {bin}: {e}"))
}

/// The browser's WebSocket URL, from the `DevToolsActivePort` file Chromium writes into the
/// profile once it listens (first line the port, second the path); up to 30 s.
fn wait_devtools_url(profile: &Path, log: &Path) -> String {
    let file = profile.join("DevToolsActivePort");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = std::fs::read_to_string(&file) {
            let mut lines = s.lines();
            if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                return format!("ws://127.0.0.1:{port}{path}");
            }
        }
        assert!(
            Instant::now() < deadline,
            "Chromium did not start listening within 30 s; its log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn connect_stream(ws_url: &str) -> TcpStream {
    let hostport = ws_url.trim_start_matches("ws://").split('/').next().unwrap();
    let s = TcpStream::connect(hostport).unwrap_or_else(|e| panic!("connecting to Chromium at {hostport}: {e}"));
    s.set_nodelay(true).unwrap();
    s.set_write_timeout(Some(COMMAND_LIMIT)).unwrap();
    s
}

/// `s` as a JavaScript string literal.
pub fn js_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}
