//! Progress rides on the heartbeat: stored on the job, fenced by the lease token, kept across
//! retries and expired leases, returned by the next claim (both claim forms).

use jq_pg_test::{broken, claim, job_row, sabotage, sqlstate, Claimed, Client, TestDb};
use serde_json::{json, Value};
use std::sync::{Arc, Barrier};
use std::thread;

use super::{enqueue, fail, reap};

const HEARTBEAT: &str = "jq.heartbeat(bigint,uuid,interval,jsonb)";

/// jq.heartbeat with progress -> whether the lease was renewed.
fn report(c: &mut Client, j: &Claimed, progress: Option<&Value>) -> bool {
    c.query_one(
        "SELECT lease_expires_at IS NOT NULL FROM jq.heartbeat($1, $2, progress => $3)",
        &[&j.id, &j.token, &progress],
    )
    .expect("jq.heartbeat with progress")
    .get(0)
}

fn stored(c: &mut Client, id: i64) -> Option<Value> {
    c.query_one("SELECT progress FROM jq.jobs WHERE id = $1", &[&id]).expect("progress").get(0)
}

/// (id, progress) of the jobs a claim of n returns.
fn claim_progress(c: &mut Client, queue: &str, n: i32) -> Vec<(i64, uuid::Uuid, Option<Value>)> {
    c.query("SELECT id, lease_token, progress FROM jq.claim($1, 'w', $2)", &[&queue, &n])
        .expect("jq.claim")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[test]
fn progress_is_kept_across_a_failed_attempt_and_an_expired_lease_and_returned_by_the_claim() {
    let db = TestDb::new("progress_keep");
    let mut c = db.connect();
    c.execute("SELECT jq.create_queue('q', backoff_base => '0', jitter => 'none')", &[]).unwrap();
    let id = enqueue(&mut c, "q");
    let first = claim_progress(&mut c, "q", 1);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].2, None, "a new job has no progress");
    let j = Claimed { id, token: first[0].1, attempt: 1 };

    let p1 = json!({"percent": 40, "checkpoint": {"row": 4000}, "message": "quotes \" and \\ kept"});
    assert!(report(&mut c, &j, Some(&p1)));
    assert_eq!(stored(&mut c, id), Some(p1.clone()));
    assert!(report(&mut c, &j, None), "a plain heartbeat");
    assert_eq!(stored(&mut c, id), Some(p1.clone()), "SQL NULL progress keeps the stored one");

    // A failed attempt (retried at once): the next claim, one-job form, resumes from it.
    assert_eq!(fail(&mut c, &j, "boom").as_deref(), Some("ready"));
    let second = claim_progress(&mut c, "q", 1);
    assert_eq!(second[0].2, Some(p1.clone()), "the one-job claim returns the progress");
    let j2 = Claimed { id, token: second[0].1, attempt: 2 };
    let p2 = json!({"percent": 70});
    assert!(report(&mut c, &j2, Some(&p2)));

    // An expired lease: reaped, claimed again in a batch, still there.
    assert_eq!(reap(&mut c, "now() + interval '1 hour'"), 1);
    let other = enqueue(&mut c, "q");
    let third = claim_progress(&mut c, "q", 10);
    let got: Vec<(i64, Option<Value>)> = third.iter().map(|(i, _, p)| (*i, p.clone())).collect();
    assert!(got.contains(&(id, Some(p2.clone()))), "the batch claim returns the progress: {got:?}");
    assert!(got.contains(&(other, None)), "{got:?}");
    // JSON null is stored as JSON null.
    let j3 = Claimed { id, token: third.iter().find(|t| t.0 == id).unwrap().1, attempt: 3 };
    assert!(report(&mut c, &j3, Some(&Value::Null)));
    assert_eq!(c.query_one("SELECT progress = 'null'::jsonb FROM jq.jobs WHERE id = $1", &[&id]).unwrap().get::<_, bool>(0), true);
}

#[test]
fn progress_over_the_limit_is_refused_with_54000_and_changes_nothing() {
    let db = TestDb::new("progress_limit");
    let mut c = db.connect();
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let id = enqueue(&mut c, "q");
    let j = claim(&mut c, "q", "w", 1, None).pop().unwrap();
    let limit: i32 = c.query_one("SELECT jq.max_progress_bytes()", &[]).unwrap().get(0);
    assert_eq!(limit, 65536);
    // Exactly at the limit as JSON text ("..." quotes included) is accepted.
    let at = Value::String("x".repeat(limit as usize - 2));
    assert!(report(&mut c, &j, Some(&at)));
    let before = job_row(&mut c, id);
    let over = Value::String("x".repeat(limit as usize - 1));
    let err = c
        .query_one("SELECT jq.heartbeat($1, $2, progress => $3)", &[&j.id, &j.token, &over])
        .map(|_| ());
    let e = err.as_ref().unwrap_err().as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    assert_eq!(sqlstate(err), "54000");
    assert!(e.contains("jq.max_progress_bytes"), "the error names the limit: {e}");
    assert_eq!(job_row(&mut c, id), before, "a refused heartbeat changed the job (lease or progress)");
}

// Progress fencing after a lost lease. w1 loses its lease (reaped), w2 claims the job again; then
// w1 and w2 report progress at the same instant, many rounds: only w2's may ever be stored and
// w1's heartbeats must renew nothing.
// Negative control: JQ_TEST_BREAK=progress_unfenced (jq.heartbeat fenced on id and state only,
// no lease token) made this test fail: w1's stale heartbeat returned a lease and its progress
// overwrote w2's ("stale worker's progress stored").
#[test]
fn a_worker_that_lost_its_lease_cannot_write_progress_even_racing_the_new_holder() {
    let db = TestDb::new("progress_fence");
    let mut c = db.connect();
    if broken("progress_unfenced") {
        sabotage(
            &mut c,
            HEARTBEAT,
            "j.id = heartbeat.id AND j.lease_token = heartbeat.lease_token AND",
            "j.id = heartbeat.id AND",
            1,
        );
    }
    c.execute("SELECT jq.create_queue('q')", &[]).unwrap();
    let id = enqueue(&mut c, "q");
    let old = claim(&mut c, "q", "w1", 1, Some("1 second")).pop().unwrap();
    assert!(report(&mut c, &old, Some(&json!({"by": "w1", "round": -1}))));
    assert_eq!(reap(&mut c, "now() + interval '1 hour'"), 1, "w1's lease is reaped");
    let new = claim(&mut c, "q", "w2", 1, Some("1 hour")).pop().unwrap();
    assert_eq!(new.id, id);

    const ROUNDS: i32 = 200;
    let barrier = Arc::new(Barrier::new(2));
    let run = |who: &'static str, j: Claimed| {
        let (mut conn, barrier) = (db.connect(), barrier.clone());
        thread::spawn(move || {
            let mut renewed = 0;
            for round in 0..ROUNDS {
                barrier.wait();
                if report(&mut conn, &j, Some(&json!({"by": who, "round": round}))) {
                    renewed += 1;
                }
            }
            renewed
        })
    };
    let (h1, h2) = (run("w1", old), run("w2", new));
    let (stale, current) = (h1.join().unwrap(), h2.join().unwrap());
    let last = stored(&mut c, id).unwrap();
    assert_eq!(last["by"], json!("w2"), "stale worker's progress stored: {last}");
    assert_eq!(last["round"], json!(ROUNDS - 1), "{last}");
    assert_eq!((stale, current), (0, ROUNDS), "(stale renewals, current renewals)");
}
