//! The library in-process: a handler's success, error, panic, timeout, an operator's cancel
//! seen through a heartbeat, and a kind without a handler, each ending as jq records it.

mod common;
use common::*;
use std::time::Duration;
use worker_client::{config_from_env, Job, Worker};

#[derive(Debug)]
struct Cause;
impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "disk full")
    }
}
impl std::error::Error for Cause {}

#[derive(Debug)]
struct Outer(Cause);
impl std::fmt::Display for Outer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write report")
    }
}
impl std::error::Error for Outer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[test]
fn outcomes_of_handlers() {
    let db = TestDb::new("handlers");
    let mut c = db.connect();
    create_queue(&mut c, "lib", "3 seconds", ", max_attempts => 1");
    let id = |c: &mut Client, kind: &str| -> i64 {
        c.query_one("SELECT jq.enqueue('lib', '{\"x\":1}', kind => $1)", &[&kind]).unwrap().get(0)
    };
    let ok = id(&mut c, "ok");
    let err = id(&mut c, "err");
    let panics = id(&mut c, "panic");
    let slow = id(&mut c, "slow");
    let cancel = id(&mut c, "cancelme");
    let unknown = id(&mut c, "mystery");
    let nul = id(&mut c, "nul");
    let nulresult = id(&mut c, "nulresult");
    let nulresult_runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let runs = nulresult_runs.clone();

    let config = config_from_env(Some(&db.conninfo())).unwrap();
    let worker = Worker::builder(config)
        .queue("lib")
        .handler("ok", |job: Job| async move { Ok(Some(serde_json::json!({ "got": job.payload["x"] }))) })
        .handler("err", |_job: Job| async move { Err(Box::new(Outer(Cause)) as worker_client::BoxError) })
        .handler("panic", |_job: Job| async move {
            if true {
                panic!("kaboom");
            }
            Ok(None)
        })
        .handler("slow", |_job: Job| async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(None)
        })
        .handler("cancelme", |job: Job| async move {
            tokio::select! {
                _ = job.cancelled() => Err("stopped on request".into()),
                _ = tokio::time::sleep(Duration::from_secs(60)) => Ok(None),
            }
        })
        .handler("nul", |_job: Job| async move { Err("bad \0 byte".into()) })
        // Succeeds with a result jsonb refuses (22P05): completed without it, never run again.
        .handler("nulresult", move |_job: Job| {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { Ok(Some(serde_json::json!({ "x": "\u{0}" }))) }
        })
        .concurrency(8)
        .job_timeout(Duration::from_secs(3))
        .heartbeat_interval(Duration::from_millis(300))
        .worker_name("lib-test")
        .build()
        .unwrap();
    let runner = InProcess::start(worker);

    wait_until(Duration::from_secs(20), "cancelme running", || {
        state(&mut c, cancel).as_deref() == Some("running")
    });
    assert!(c.query_one("SELECT jq.cancel($1)", &[&cancel]).unwrap().get::<_, bool>(0));
    wait_until(Duration::from_secs(30), "all settled", || {
        db.count(&mut c, "SELECT count(*) FROM jq.jobs WHERE state IN ('completed','dead','cancelled')") == 8
    });
    let stats = runner.stop();
    assert_eq!(stats.claimed, 8);
    assert_eq!(stats.completed, 2);
    assert_eq!(stats.failed, 6);

    let row = |c: &mut Client, id: i64| -> (String, Option<String>, Option<String>) {
        let r = c.query_one("SELECT state::text, last_error, result::text FROM jq.jobs WHERE id = $1", &[&id]).unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!(row(&mut c, ok), ("completed".into(), None, Some("{\"got\": 1}".into())));
    assert_eq!(row(&mut c, err), ("dead".into(), Some("cannot write report: disk full".into()), None));
    assert_eq!(row(&mut c, panics), ("dead".into(), Some("handler panicked: kaboom".into()), None));
    assert_eq!(row(&mut c, slow), ("dead".into(), Some("timed out after 3s".into()), None));
    assert_eq!(row(&mut c, cancel), ("cancelled".into(), Some("stopped on request".into()), None));
    let (st, e, _) = row(&mut c, unknown);
    assert_eq!(st, "dead");
    assert!(e.unwrap().starts_with("no handler for kind \"mystery\""));
    // A NUL in the error text is recorded (escaped), not a reason to strand the job.
    assert_eq!(row(&mut c, nul), ("dead".into(), Some("bad \\u0000 byte".into()), None));
    // A result that cannot be stored: the job is completed with the reason, after one run.
    // Seen failing before the fix: the job was failed ("dead", max_attempts 1) instead.
    let (st, e, result) = row(&mut c, nulresult);
    assert_eq!((st.as_str(), e), ("completed", None));
    let result = result.expect("a result saying why the handler's was not stored");
    assert!(result.contains("result_not_stored") && result.contains("22P05"), "{result}");
    assert_eq!(nulresult_runs.load(std::sync::atomic::Ordering::SeqCst), 1, "the handler ran again");
}
