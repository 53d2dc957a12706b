//! `jqctl work -- CMD`: when a job ends is decided by the command's exit, and a command that
//! succeeded runs once, whatever its output.

mod common;
use common::*;
use std::time::Duration;

/// A command that exits while a background child it started still holds its stdout and stderr
/// (`sleep 30 &`) completes its job when it exits, with what it wrote, not when the child ends.
/// Seen failing before the fix: the job stayed running until the child's 30 s were up.
#[test]
fn a_job_ends_when_its_command_exits_not_when_its_background_children_do() {
    let db = TestDb::new("cmd_bg");
    let mut c = db.connect();
    create_queue(&mut c, "bg", "60 seconds", "");
    let id: i64 = c.query_one("SELECT jq.enqueue('bg', '{}')", &[]).unwrap().get(0);
    let _w = WorkerProc::start(&db, "bg", "w", &[], "sleep 30 & echo '{\"done\": true}'", &[]);
    wait_until(Duration::from_secs(10), "the job completed when its command exited", || {
        state(&mut c, id).as_deref() == Some("completed")
    });
    let result: Option<String> =
        c.query_one("SELECT result::text FROM jq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert_eq!(result.as_deref(), Some("{\"done\": true}"));
}

/// A command that succeeds with a result jsonb refuses (`\u0000`, 22P05) completes its job once,
/// with the reason the result was not kept, instead of failing and running again.
/// Seen failing before the fix: the command ran max_attempts (3) times and the job went dead.
#[test]
fn a_command_whose_result_cannot_be_stored_runs_once_and_completes() {
    let db = TestDb::new("cmd_nul");
    let mut c = db.connect();
    create_queue(&mut c, "nul", "60 seconds", ", max_attempts => 3, backoff_base => '0 seconds'");
    let runs = log_dir().join(format!("{}-runs.log", db.name));
    let _ = std::fs::remove_file(&runs);
    let id: i64 = c.query_one("SELECT jq.enqueue('nul', '{}')", &[]).unwrap().get(0);
    let script = format!("echo run >> '{}'; printf '{{\"x\":\"\\\\u0000\"}}'", runs.display());
    let _tick = Ticker::start(&db, Duration::from_millis(200)); // promotes a retry, were there one
    let _w = WorkerProc::start(&db, "nul", "w", &[], &script, &[]);
    wait_until(Duration::from_secs(30), "the job completed or dead", || {
        matches!(state(&mut c, id).as_deref(), Some("completed" | "dead"))
    });
    let (st, result): (String, Option<String>) = c
        .query_one("SELECT state::text, result::text FROM jq.jobs WHERE id = $1", &[&id])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(st, "completed");
    assert!(result.as_deref().is_some_and(|r| r.contains("result_not_stored")), "{result:?}");
    let ran = std::fs::read_to_string(&runs).unwrap_or_default().lines().count();
    assert_eq!(ran, 1, "the command ran {ran} times");
}

/// `jqctl expire-lease ID` takes back a running job (jq.expire_lease): exit 0 and the job ready
/// again; a second call, with nothing running, is a one-line error and exit 1; a lease token of
/// another attempt changes nothing.
#[test]
fn expire_lease_takes_back_a_running_job_once() {
    let db = TestDb::new("cmd_expire");
    let mut c = db.connect();
    create_queue(&mut c, "ex", "60 seconds", "");
    let id: i64 = c.query_one("SELECT jq.enqueue('ex', '{}')", &[]).unwrap().get(0);
    c.batch_execute("SELECT jq.claim('ex', 'w', lease => '100 years')").unwrap();
    let wrong = db.jqctl().args(["expire-lease", &id.to_string(), "--lease-token",
                                 "00000000-0000-4000-8000-000000000000"]).output().unwrap();
    assert_eq!(wrong.status.code(), Some(1), "{wrong:?}");
    assert_eq!(state(&mut c, id).as_deref(), Some("running"));
    let out = db.jqctl().args(["expire-lease", &id.to_string()]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("taken back: now ready"), "{out:?}");
    assert_eq!(state(&mut c, id).as_deref(), Some("ready"));
    let again = db.jqctl().args(["expire-lease", &id.to_string()]).output().unwrap();
    assert_eq!(again.status.code(), Some(1));
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not running"), "{err}");
}

/// A kind's wall timeout reaches `jqctl work` through the claimed row: the command gets SIGTERM
/// (it traps it and says so) and the worker fails the job `timed out after 3s` before
/// maintenance (jq.tick every 200 ms here) would end the attempt with its own error.
#[test]
fn a_kinds_timeout_stops_the_command_before_the_database_does() {
    let db = TestDb::new("cmd_kind_timeout");
    let mut c = db.connect();
    create_queue(&mut c, "kt", "60 seconds", ", max_attempts => 1");
    c.batch_execute("SELECT jq.alter_kind('kt', 'kt', timeout => '3 seconds')").unwrap();
    let marks = log_dir().join(format!("{}-term.log", db.name));
    let _ = std::fs::remove_file(&marks);
    let id: i64 = c.query_one("SELECT jq.enqueue('kt', '{}')", &[]).unwrap().get(0);
    let _tick = Ticker::start(&db, Duration::from_millis(200));
    let script = format!("trap 'echo term >> \"{}\"; exit 143' TERM; sleep 60 & wait", marks.display());
    let _w = WorkerProc::start(&db, "kt", "w", &[], &script, &[]);
    wait_until(Duration::from_secs(20), "the job is dead", || state(&mut c, id).as_deref() == Some("dead"));
    let error: String = c.query_one("SELECT last_error FROM jq.jobs WHERE id = $1", &[&id]).unwrap().get(0);
    assert_eq!(error, "timed out after 3s", "not the worker's verdict");
    assert_eq!(std::fs::read_to_string(&marks).unwrap_or_default().trim(), "term", "the command got no SIGTERM");
}
