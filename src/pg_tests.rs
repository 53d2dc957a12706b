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

}
