//! A real `jqctl dashboard` process for the browser tests (tests/dashboard_browser.rs): started
//! on a free loopback port, ready once it printed `dashboard: http://ADDR/BASE` on stdout, and
//! killed on drop.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::{jqctl_with_url, log_dir};

/// A running `jqctl dashboard`; SIGKILLed on drop.
pub struct DashboardProc {
    child: Child,
    /// The URL it printed, without a trailing slash (`http://127.0.0.1:PORT` or with the base path).
    pub base: String,
    pub log: PathBuf,
}

impl DashboardProc {
    /// `jqctl dashboard --listen 127.0.0.1:0 ARGS…` against `url` (the database and role the
    /// dashboard connects as); waits up to 60 s for its URL line, logging stderr to
    /// `<log_name>.log` in the client tests' log folder.
    pub fn start(url: &str, log_name: &str, args: &[&str]) -> DashboardProc {
        let log = log_dir().join(format!("{log_name}.log"));
        let err = std::fs::File::create(&log).unwrap();
        let mut child = jqctl_with_url(url)
            .args(["dashboard", "--listen", "127.0.0.1:0"])
            .args(args)
            .envs(super::break_env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .expect("start jqctl dashboard");
        // Reads stdout on a thread (to the end, so the dashboard never blocks on a full pipe)
        // and hands over the first URL line.
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(u) = line.strip_prefix("dashboard: ") {
                    let _ = tx.send(u.trim().trim_end_matches('/').to_string());
                }
            }
        });
        let base = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                panic!("jqctl dashboard printed no URL within 60 s; its log:\n{}", std::fs::read_to_string(&log).unwrap_or_default())
            }
        };
        DashboardProc { child, base, log }
    }

    /// The absolute URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for DashboardProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
