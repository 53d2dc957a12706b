//! In-backend tests (`cargo pgrx test`): each runs inside one transaction that is rolled back,
//! so they cover the SQL API's answers, not effects that need commits or other sessions (those
//! live in `pg_test/`).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn backoff_seconds_from_sql() {
        let d = Spi::get_one::<f64>("SELECT jq.backoff_seconds('exponential', 1, 3600, 3, 'none', 0.5)")
            .unwrap()
            .unwrap();
        assert_eq!(d, 4.0);
    }

    #[pg_test(error = "unknown backoff policy \"quadratic\": expected fixed, linear or exponential")]
    fn backoff_seconds_rejects_unknown_policy() {
        Spi::run("SELECT jq.backoff_seconds('quadratic', 1, 3600, 3, 'none', 0.5)").unwrap();
    }

    #[pg_test]
    fn enqueue_claim_complete_round_trip() {
        Spi::run("SELECT jq.create_queue('t')").unwrap();
        let id = Spi::get_one::<i64>("SELECT jq.enqueue('t', '{\"a\":1}')").unwrap().unwrap();
        let (cid, token) = Spi::get_two::<i64, pgrx::Uuid>("SELECT id, lease_token FROM jq.claim('t', 'w1')").unwrap();
        assert_eq!(cid, Some(id));
        let ok = Spi::get_one_with_args::<bool>(
            "SELECT jq.complete($1, $2)",
            &[id.into(), token.unwrap().into()],
        )
        .unwrap();
        assert_eq!(ok, Some(true));
        let state = Spi::get_one::<String>(&format!("SELECT state::text FROM jq.jobs WHERE id = {id}")).unwrap();
        assert_eq!(state.as_deref(), Some("completed"));
    }


    /// Reads one text value.
    fn text(sql: &str) -> Option<String> {
        Spi::get_one::<String>(sql).unwrap()
    }

    #[pg_test]
    fn create_queue_applies_documented_defaults() {
        Spi::run("SELECT jq.create_queue('d')").unwrap();
        assert_eq!(
            text("SELECT format('%s|%s|%s|%s|%s|%s|%s', max_attempts, lease, backoff, backoff_base,
                                backoff_max, jitter, max_concurrency IS NULL) FROM jq.queues WHERE name = 'd'")
                .as_deref(),
            Some("25|00:05:00|exponential|00:00:01|01:00:00|full|t")
        );
    }

    #[pg_test(error = "queue \"nope\" does not exist")]
    fn enqueue_to_an_unknown_queue_is_an_error_not_an_auto_create() {
        Spi::run("SELECT jq.enqueue('nope')").unwrap();
    }

    #[pg_test(error = "n must be between 1 and 1000, got 0")]
    fn claim_rejects_n_of_zero() {
        Spi::run("SELECT jq.create_queue('z'); SELECT * FROM jq.claim('z', 'w', 0)").unwrap();
    }

    #[pg_test]
    fn delayed_job_is_scheduled_and_negative_delay_means_now() {
        Spi::run("SELECT jq.create_queue('s')").unwrap();
        for (delay, want) in [("1 hour", "scheduled"), ("-5 minutes", "ready"), ("0", "ready")] {
            let id = Spi::get_one::<i64>(&format!("SELECT jq.enqueue('s', delay => '{delay}')")).unwrap().unwrap();
            assert_eq!(text(&format!("SELECT state::text FROM jq.jobs WHERE id = {id}")).as_deref(), Some(want), "delay {delay}");
        }
    }

    #[pg_test]
    fn fail_on_last_attempt_is_dead_and_earlier_is_scheduled() {
        Spi::run("SELECT jq.create_queue('f', max_attempts => 2, backoff_base => '10 seconds', jitter => 'none')").unwrap();
        Spi::run("SELECT jq.enqueue('f')").unwrap();
        assert_eq!(text("SELECT jq.fail(id, lease_token, 'e1')::text FROM jq.claim('f', 'w')").as_deref(), Some("scheduled"));
        Spi::run("SELECT jq._promote(now() + interval '11 seconds')").unwrap();
        assert_eq!(text("SELECT jq.fail(id, lease_token, 'e2')::text FROM jq.claim('f', 'w')").as_deref(), Some("dead"));
        assert_eq!(text("SELECT string_agg(outcome::text || attempt, ',' ORDER BY seq) FROM jq.executions").as_deref(), Some("failed1,failed2"));
    }

    #[pg_test]
    fn complete_with_a_wrong_token_changes_nothing() {
        Spi::run("SELECT jq.create_queue('c'); SELECT jq.enqueue('c')").unwrap();
        assert_eq!(
            Spi::get_one::<bool>("SELECT jq.complete(id, gen_random_uuid()) FROM jq.claim('c', 'w')").unwrap(),
            Some(false)
        );
        assert_eq!(text("SELECT state::text FROM jq.jobs").as_deref(), Some("running"));
        assert_eq!(Spi::get_one::<i64>("SELECT count(*) FROM jq.executions").unwrap(), Some(0));
    }

    #[pg_test]
    fn tick_returns_its_counts() {
        Spi::run("SELECT jq.create_queue('t'); SELECT jq.enqueue('t', delay => '-1 second')").unwrap();
        assert_eq!(text("SELECT format('%s/%s/%s', promoted, reaped, pruned) FROM jq.tick()").as_deref(), Some("0/0/0"));
    }

    #[pg_test]
    fn queue_stats_depth_is_claimable_plus_scheduled() {
        Spi::run("SELECT jq.create_queue('st'); SELECT jq.enqueue('st'); SELECT jq.enqueue('st', delay => '1 day')").unwrap();
        assert_eq!(
            text("SELECT format('%s=%s+%s', depth, claimable, scheduled) FROM jq.queue_stats WHERE queue = 'st'").as_deref(),
            Some("2=1+1")
        );
    }

    /// Rust's queue hash is SQL's `hashtextextended(name, 0)` (src/queue_hash.rs), so the ready
    /// filter's bit of a queue is the low 10 bits of the claim index's key.
    #[pg_test]
    fn queue_hash_is_hashtextextended() {
        for q in ["", "a", "emails", "Ünïcödé queue", "a much longer queue name than most people would ever use"] {
            let hash = crate::queue_hash::QueueHash::of(q);
            let sql = Spi::get_one_with_args::<i64>("SELECT pg_catalog.hashtextextended($1, 0)", &[q.into()])
                .unwrap()
                .unwrap();
            assert_eq!(hash.0 as i64, sql, "{q:?}");
            let bit = Spi::get_one_with_args::<bool>(
                "SELECT jq._queue_bit($1) = (pg_catalog.hashtextextended($1, 0) & 1023)::int",
                &[q.into()],
            )
            .unwrap();
            assert_eq!(bit, Some(true), "{q:?}");
        }
    }
}
