//! `jqctl` against a stopped server, a database without jq, and a missing queue: one clear
//! line on stderr, a non-zero exit, no panic or backtrace.

mod common;
use common::*;

fn check(mut cmd: std::process::Command, expect: &str) {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit status for {cmd:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line for {cmd:?}: {err}");
    assert!(err.starts_with("jqctl: error: "), "{err}");
    assert!(err.contains(expect), "{cmd:?}: expected {expect:?} in {err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
}

#[test]
fn stopped_server_missing_extension_missing_queue() {
    // A port where nothing listens: the test cluster's port + 97 (the caller's range).
    let dead = format!("postgresql://postgres@127.0.0.1:{}/x", port() + 97);
    for args in [&["stats"][..], &["queues"], &["work", "--queue", "q", "--", "true"], &["enqueue", "q", "{}"]] {
        let mut c = jqctl_with_url(&dead);
        c.args(args);
        check(c, "cannot connect to PostgreSQL at 127.0.0.1:");
    }

    let plain = TestDb::on_port(port(), "nojq", "");
    for args in [&["stats"][..], &["work", "--queue", "q", "--", "true"], &["enqueue", "q", "{}"], &["retry", "1"]] {
        let mut c = plain.jqctl();
        c.args(args);
        check(c, "jq is not installed in database");
    }

    let db = TestDb::new("noqueue");
    for args in [
        &["work", "--queue", "nope", "--", "true"][..],
        &["enqueue", "nope", "{}"],
        &["pause", "nope"],
        &["resume", "nope"],
        &["jobs", "--queue", "nope", "--state", "dead"],
    ] {
        let mut c = db.jqctl();
        c.args(args);
        check(c, "queue \"nope\" does not exist");
    }
    // The queue exists once created, and the same commands succeed.
    let out = db.jqctl().args(["create-queue", "nope", "--lease", "30s"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for args in [&["enqueue", "nope", "{\"a\":1}"][..], &["pause", "nope"], &["resume", "nope"], &["jobs", "--queue", "nope", "--state", "dead"], &["stats"]] {
        let out = db.jqctl().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // A command that cannot run is refused before any job is claimed.
    let mut c = db.jqctl();
    c.args(["work", "--queue", "nope", "--", "/no/such/handler"]);
    check(c, "command not found or not executable: /no/such/handler");
    // Bad input is refused with one line too.
    let mut c = db.jqctl();
    c.args(["enqueue", "nope", "{not json"]);
    check(c, "not JSON");
    let mut c = db.jqctl();
    c.args(["create-queue", "nope"]);
    check(c, "SQLSTATE 42710");
    let mut c = db.jqctl();
    c.args(["work", "--queue", "nope", "--call-timeout", "10ms", "--", "true"]);
    check(c, "call timeout must be at least 100 ms");
}
