//! A database with something of everything jq stores, made through the API of the oldest
//! release (so it can populate a 0.1.0 install before an upgrade as well as a current one): for
//! the upgrade and dump/restore tests.

use crate::{claim, complete, Claimed, Client};

/// What [`populate`] made, for the checks after an upgrade or a restore.
pub struct Population {
    /// Jobs of queue `pop_work` claimed by the worker connection with a 10-minute lease, still
    /// running: their tokens must keep working.
    pub held: Vec<Claimed>,
    /// The running head of key `k` in queue `pop_keyed` (two more jobs of the key are blocked).
    pub keyed_head: Claimed,
    /// A dead job (queue `pop_once`) and a cancelled one (queue `pop_work`).
    pub dead: i64,
    pub cancelled: i64,
    /// Next fire time of schedule `pop_minute` (every minute), in epoch seconds: a
    /// `jq.cron_tick` at it must enqueue one job.
    pub next_fire: i64,
}

/// Queues `pop_work` (lease 10 minutes), `pop_once` (max_attempts 1), `pop_keyed`
/// (key_concurrency 1), `pop_paused` (paused), `pop_cron` and `pop_rate` (rate limited); jobs in
/// every state (scheduled by delay and by a retry, blocked, ready, running held by `worker`,
/// completed with a result, dead, cancelled, a reaped lease); schedules `pop_minute` (fired
/// once, so jq.cron_runs has a row) and `pop_paris` (a time zone, disabled); execution history
/// of every outcome these make. `c` is the admin/producer connection, `worker` holds the leases.
pub fn populate(c: &mut Client, worker: &mut Client) -> Population {
    c.batch_execute(
        "SELECT jq.create_queue('pop_work', lease => '10 minutes', max_attempts => 5);
         SELECT jq.create_queue('pop_once', max_attempts => 1);
         SELECT jq.create_queue('pop_keyed', key_concurrency => 1);
         SELECT jq.create_queue('pop_paused', paused => true);
         SELECT jq.create_queue('pop_cron');
         SELECT jq.create_queue('pop_rate');
         SELECT jq.alter_queue('pop_rate', rate_limit => 5, rate_period => '1 minute', burst => 5);
         SELECT jq.enqueue('pop_work', jsonb_build_object('n', g), kind => 'k' || (g % 3), priority => g % 2)
         FROM generate_series(1, 30) g;
         SELECT jq.enqueue('pop_work', '{\"later\": true}', delay => '2 hours');
         SELECT jq.enqueue('pop_work', '{\"idem\": true}', idempotency_key => 'idem-1');
         SELECT jq.enqueue('pop_paused', '{\"p\": 1}');
         SELECT jq.enqueue('pop_rate', jsonb_build_object('r', g)) FROM generate_series(1, 3) g;
         SELECT jq.enqueue_many('pop_once', '[{\"a\": 1}, {\"a\": 2}]');
         SELECT jq.enqueue('pop_keyed', jsonb_build_object('k', g), concurrency_key => 'k') FROM generate_series(1, 3) g;",
    )
    .expect("populate: queues and jobs");
    // Completed (with and without a result), failed and retried later, reaped.
    let done = claim(c, "pop_work", "w-done", 4, None);
    assert_eq!(done.len(), 4);
    for (i, j) in done.iter().enumerate() {
        if i == 0 {
            let ok: bool = c
                .query_one("SELECT jq.complete($1, $2, '{\"ok\": 1}')", &[&j.id, &j.token])
                .unwrap()
                .get(0);
            assert!(ok);
        } else {
            assert!(complete(c, j));
        }
    }
    for j in claim(c, "pop_work", "w-fail", 2, None) {
        c.execute("SELECT jq.fail($1, $2, 'boom', retry_in => '3 hours')", &[&j.id, &j.token]).unwrap();
    }
    let reaped = claim(c, "pop_work", "w-lost", 1, Some("1 second"));
    assert_eq!(reaped.len(), 1);
    let n: i32 = c.query_one("SELECT jq._reap(now() + interval '1 minute')", &[]).unwrap().get(0);
    assert_eq!(n, 1, "exactly the 1-second lease expires a minute from now");
    // Released (attempt refunded, back to ready).
    for j in claim(c, "pop_work", "w-release", 1, None) {
        let ok: bool = c.query_one("SELECT jq.release($1, $2)", &[&j.id, &j.token]).unwrap().get(0);
        assert!(ok);
    }
    // Dead: max_attempts 1 and a failure. The other pop_once job stays ready.
    let once = claim(c, "pop_once", "w-once", 1, None);
    let st: String =
        c.query_one("SELECT jq.fail($1, $2, 'fatal')::text", &[&once[0].id, &once[0].token]).unwrap().get(0);
    assert_eq!(st, "dead");
    // Cancelled: a ready job.
    let cancelled: i64 = c
        .query_one(
            "SELECT id FROM jq.jobs WHERE queue = 'pop_work' AND state = 'ready' ORDER BY id DESC LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);
    let ok: bool = c.query_one("SELECT jq.cancel($1)", &[&cancelled]).unwrap().get(0);
    assert!(ok);
    // Running, held by the worker across what follows; one heartbeat already made.
    let held = claim(worker, "pop_work", "w-held", 5, None);
    assert_eq!(held.len(), 5);
    worker.execute("SELECT jq.heartbeat($1, $2)", &[&held[0].id, &held[0].token]).unwrap();
    let keyed = claim(worker, "pop_keyed", "w-keyed", 5, None);
    assert_eq!(keyed.len(), 1, "key k admits one job at a time");
    // Schedules and the fire log.
    c.batch_execute(
        "SELECT jq.schedule('pop_minute', '* * * * *', 'pop_cron', '{\"s\": 1}', kind => 'tick');
         SELECT jq.schedule('pop_paris', '0 9 * * 1-5', 'pop_cron', timezone => 'Europe/Paris', misfire => 'skip');
         SELECT jq.alter_schedule('pop_paris', enabled => false);",
    )
    .expect("populate: schedules");
    let first: i64 = c
        .query_one("SELECT extract(epoch FROM next_run_at)::bigint FROM jq.schedules WHERE name = 'pop_minute'", &[])
        .unwrap()
        .get(0);
    let fired: i32 = c.query_one("SELECT jq.cron_tick(to_timestamp($1::bigint))", &[&first]).unwrap().get(0);
    assert_eq!(fired, 1);
    let states: Vec<String> = c
        .query("SELECT DISTINCT state::text FROM jq.jobs ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        states,
        ["blocked", "cancelled", "completed", "dead", "ready", "running", "scheduled"],
        "populate makes jobs in every state"
    );
    let outcomes: Vec<String> = c
        .query("SELECT DISTINCT outcome::text FROM jq.executions ORDER BY 1", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(outcomes, ["completed", "failed", "lease_expired", "released"]);
    Population { held, keyed_head: keyed[0].clone(), dead: once[0].id, cancelled, next_fire: first + 60 }
}
