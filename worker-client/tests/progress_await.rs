//! `jqctl work` forwards the progress its command writes to `$JQ_PROGRESS_FILE`, the next
//! attempt sees it in `$JQ_PROGRESS`, `jqctl show` prints it, and `jqctl enqueue --wait` prints
//! a job's result and exits by its outcome. Real processes: jqctl and `sh` commands.

mod common;
use common::*;
use std::time::Duration;

/// A command reports progress twice, then waits for a go-ahead file: the second report must be
/// stored (jq.jobs.progress) while it still runs; it then fails, and the retry's command sees
/// the stored progress in JQ_PROGRESS and completes. `jqctl show` prints the progress and both
/// executions.
#[test]
fn a_commands_progress_lines_are_stored_while_it_runs_and_handed_to_the_retry() {
    let db = TestDb::new("prog_cmd");
    let mut c = db.connect();
    create_queue(&mut c, "pg", "3 seconds", ", max_attempts => 2, backoff_base => '0 seconds'");
    let go = log_dir().join(format!("{}-go", db.name));
    let seen = log_dir().join(format!("{}-seen", db.name));
    let _ = std::fs::remove_file(&go);
    let id: i64 = c.query_one("SELECT jq.enqueue('pg', '{}')", &[]).unwrap().get(0);
    let script = format!(
        "if [ -n \"$JQ_PROGRESS\" ]; then printf '%s' \"$JQ_PROGRESS\" > '{seen}'; exit 0; fi; \
         echo '{{\"percent\": 10}}' >> \"$JQ_PROGRESS_FILE\"; echo 'not json' >> \"$JQ_PROGRESS_FILE\"; \
         echo '{{\"percent\": 50, \"row\": 5000}}' >> \"$JQ_PROGRESS_FILE\"; \
         while [ ! -e '{go}' ]; do sleep 0.1; done; echo boom >&2; exit 1",
        seen = seen.display(),
        go = go.display()
    );
    let _tick = Ticker::start(&db, Duration::from_millis(200));
    let _w = WorkerProc::start(&db, "pg", "w", &[], &script, &[]);
    wait_until(Duration::from_secs(30), "the command's last progress line stored while it runs", || {
        let r = c.query_one("SELECT state::text, progress::text FROM jq.jobs WHERE id = $1", &[&id]).unwrap();
        r.get::<_, Option<String>>(1).as_deref() == Some("{\"row\": 5000, \"percent\": 50}")
            && r.get::<_, String>(0) == "running"
    });
    std::fs::write(&go, "").unwrap();
    wait_until(Duration::from_secs(30), "the retry completed", || state(&mut c, id).as_deref() == Some("completed"));
    let handed: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(handed, serde_json::json!({"percent": 50, "row": 5000}), "JQ_PROGRESS of the retry");

    let out = db.jqctl().args(["show", &id.to_string()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("\"row\": 5000"), "{text}");
    assert!(text.contains("failed") && text.contains("completed") && text.contains("boom"), "{text}");
    let jobs = db.jqctl().args(["jobs", "-Q", "pg"]).output().unwrap();
    assert!(String::from_utf8_lossy(&jobs.stdout).contains("{\"row\": 5000"), "{jobs:?}");
}

/// `jqctl enqueue --wait`: a completed job prints its result (exit 0), a dead one exits 2
/// with its error, an unfinished one exits 4 when the wait runs out.
#[test]
fn enqueue_wait_prints_the_result_and_exits_by_the_outcome() {
    let db = TestDb::new("await_cli");
    let mut c = db.connect();
    create_queue(&mut c, "ok", "60 seconds", "");
    create_queue(&mut c, "bad", "60 seconds", ", max_attempts => 1");
    create_queue(&mut c, "idle", "60 seconds", "");
    let _ok = WorkerProc::start(&db, "ok", "wok", &[], "sleep 0.5; echo '{\"answer\": 42}'", &[]);
    let _bad = WorkerProc::start(&db, "bad", "wbad", &[], "echo 'disk full' >&2; exit 3", &[]);

    let out = db.jqctl().args(["enqueue", "ok", "{}", "--wait", "60s"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "{\"answer\":42}");

    let out = db.jqctl().args(["enqueue", "bad", "{}", "--wait"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("disk full"), "{out:?}");

    let out = db.jqctl().args(["enqueue", "idle", "{}", "--wait", "300ms"]).output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("still ready"), "{out:?}");
}
