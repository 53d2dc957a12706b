//! The hot paths' statements copied from sql/*.sql, checked against the functions and EXPLAINed as prepared statements.

use jq_pg_test::Client;
use serde_json::Value;

use super::plan_tree::Explained;

/// A statement of a jq function: `source` is its text in the function body (whitespace aside),
/// `subst` turns it into a standalone statement (plpgsql variables become $n of `types`).
pub(crate) struct HotPath {
    pub(crate) label: &'static str,
    pub(crate) function: &'static str,
    pub(crate) source: &'static str,
    pub(crate) subst: &'static [(&'static str, &'static str)],
    pub(crate) types: &'static str,
}

impl HotPath {
    fn sql(&self) -> String {
        let mut sql = self.source.to_string();
        for (from, to) in self.subst {
            assert!(sql.contains(from), "{}: {from:?} not in the statement", self.label);
            sql = sql.replace(from, to);
        }
        sql
    }

    /// Fails when the function no longer runs this statement (someone changed sql/*.sql without
    /// updating the copy here, so the plans below would check a statement nobody runs).
    pub(crate) fn check_source(&self, c: &mut Client) {
        let body: String = c
            .query_one("SELECT prosrc FROM pg_catalog.pg_proc WHERE oid = $1::text::regprocedure",
                       &[&self.function])
            .unwrap_or_else(|e| panic!("{}: cannot read {}: {e}", self.label, self.function))
            .get(0);
        assert!(norm(&body).contains(&norm(self.source)),
                "{}: {} no longer contains the statement this test explains; update the copy in \
                 pg_test/tests/plans/.\n  copy: {}\n  body: {}",
                self.label, self.function, norm(self.source), norm(&body));
    }
}

/// Whitespace-insensitive form of SQL text.
pub(crate) fn norm(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(crate) const CLAIM_PICK: HotPath = HotPath {
    label: "jq._claim_batch: selection of ready jobs",
    function: "jq._claim_batch(text,text,integer,interval,boolean,bigint,boolean)",
    source: "SELECT p.id FROM ONLY jq.jobs p
             WHERE pg_catalog.hashtextextended(p.queue, 0) OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(_claim_batch.queue, 0)
               AND p.state OPERATOR(pg_catalog.=) 'ready'
               AND p.priority OPERATOR(pg_catalog.<) coalesce(_claim_batch.below, 2147483648)
               AND EXISTS (SELECT FROM jq.queues g WHERE g.name OPERATOR(pg_catalog.=) _claim_batch.queue
                           AND NOT g.paused
                           AND ((g.max_concurrency IS NULL AND g.rate_limit IS NULL) OR _claim_batch.locked IS NOT NULL))
             ORDER BY p.priority DESC, p.run_at, p.id
             LIMIT _claim_batch.n
             FOR UPDATE OF p SKIP LOCKED",
    // below NULL: the full claim with no claim-start hint before it, from the head of the
    // queue (after a hinted claim the same index range starts at the hint's priority;
    // pg_test/tests/claim_hint.rs counts the entries that one reads).
    subst: &[("_claim_batch.queue", "$1"), ("_claim_batch.n", "$2"), ("_claim_batch.locked IS NOT NULL", "false"),
             ("coalesce(_claim_batch.below, 2147483648)", "coalesce(NULL::bigint, 2147483648)")],
    types: "text, integer",
};

/// The n = 1 copy of the same selection (constant LIMIT); only its source is checked, so that
/// the two copies cannot drift apart.
pub(crate) const CLAIM_PICK_ONE: HotPath = HotPath {
    label: "jq.claim: selection of one ready job",
    function: "jq.claim(text,text,integer,interval,interval,bigint)",
    source: "SELECT p.ctid FROM ONLY jq.jobs p
             WHERE pg_catalog.hashtextextended(p.queue, 0) OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(claim.queue, 0)
               AND p.state OPERATOR(pg_catalog.=) 'ready'
               AND p.priority OPERATOR(pg_catalog.<) coalesce(v_below, 2147483648)
               AND EXISTS (SELECT FROM jq.queues g WHERE g.name OPERATOR(pg_catalog.=) claim.queue
                           AND NOT g.paused
                           AND ((g.max_concurrency IS NULL AND g.rate_limit IS NULL) OR v_locked IS NOT NULL))
             ORDER BY p.priority DESC, p.run_at, p.id
             LIMIT 1
             FOR UPDATE OF p SKIP LOCKED",
    subst: &[],
    types: "",
};

pub(crate) const CLAIM_RUNNING_COUNT: HotPath = HotPath {
    label: "jq._claim_gate: running count for max_concurrency",
    function: "jq._claim_gate(text,integer,boolean,integer,integer)",
    source: "SELECT pg_catalog.count(*) INTO v_running FROM ONLY jq.jobs j
             WHERE j.queue OPERATOR(pg_catalog.=) _claim_gate.queue AND j.state OPERATOR(pg_catalog.=) 'running'",
    subst: &[("INTO v_running ", ""), ("_claim_gate.queue", "$1")],
    types: "text",
};

pub(crate) const PROMOTE_PICK: HotPath = HotPath {
    label: "jq._promote: selection of due scheduled jobs",
    function: "jq._promote(timestamptz,integer,integer)",
    source: "SELECT d.id FROM ONLY jq.jobs d
             WHERE d.state = 'scheduled' AND (d.run_at, d.id) > (v_at, v_id) AND d.run_at <= _promote.now
               AND (d.concurrency_key IS NULL OR NOT (d.queue || E'\\x1f' || d.concurrency_key = ANY (v_busy)))
             ORDER BY d.run_at, d.id
             LIMIT _promote.batch
             FOR UPDATE SKIP LOCKED",
    subst: &[("_promote.now", "$1"), ("_promote.batch", "$2"), ("v_at", "$3"), ("v_id", "$4"), ("v_busy", "$5")],
    types: "timestamptz, integer, timestamptz, bigint, text[]",
};

pub(crate) const REAP_PICK: HotPath = HotPath {
    label: "jq._reap: selection of expired leases",
    function: "jq._reap(timestamptz,integer,integer,boolean)",
    source: "SELECT x.id, x.lease_expires_at FROM ONLY jq.jobs x
             WHERE x.state = 'running' AND x.lease_expires_at >= v_at AND x.lease_expires_at < _reap.now
             ORDER BY x.lease_expires_at
             LIMIT _reap.batch
             FOR UPDATE SKIP LOCKED",
    subst: &[("_reap.now", "$1"), ("_reap.batch", "$2"), ("v_at", "$3")],
    types: "timestamptz, integer, timestamptz",
};

pub(crate) const IDEMPOTENCY_LOOKUP: HotPath = HotPath {
    label: "jq.enqueue: lookup of the unfinished job holding an idempotency key",
    function: "jq.enqueue(text,jsonb,text,timestamptz,interval,integer,integer,text,text,bigint)",
    source: "SELECT j.id INTO v_id FROM ONLY jq.jobs j
             WHERE j.queue = enqueue.queue AND j.idempotency_key = enqueue.idempotency_key
               AND j.state IN ('scheduled', 'blocked', 'ready', 'running')",
    subst: &[("INTO v_id ", ""), ("enqueue.queue", "$1"), ("enqueue.idempotency_key", "$2")],
    types: "text, text",
};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Mode {
    Custom,
    Generic,
    /// Postgres' own choice (plpgsql: custom for five calls, then generic when it looks no worse).
    Auto,
}

impl Mode {
    pub(crate) fn setting(self) -> &'static str {
        match self {
            Mode::Custom => "force_custom_plan",
            Mode::Generic => "force_generic_plan",
            Mode::Auto => "auto",
        }
    }
}

/// EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) of the hot path with `args` (SQL expressions), as a
/// prepared statement planned in `mode`, in a transaction that is rolled back (the FOR UPDATE
/// locks and anything else go with it).
pub(crate) fn explain(c: &mut Client, path: &HotPath, args: &str, mode: Mode) -> Explained {
    let mut tx = c.transaction().expect("BEGIN");
    // The function's own settings (the SET clauses of its CREATE FUNCTION), as when it runs.
    let config: Vec<String> = tx
        .query_one("SELECT coalesce(proconfig, '{}') FROM pg_catalog.pg_proc WHERE oid = $1::text::regprocedure",
                   &[&path.function])
        .unwrap_or_else(|e| panic!("{}: cannot read {}: {e}", path.label, path.function))
        .get(0);
    for setting in config {
        let (name, value) = setting.split_once('=').expect("name=value");
        tx.batch_execute(&format!("SET LOCAL {name} = '{value}'")).expect("SET LOCAL");
    }
    tx.batch_execute(&format!(
        "SET LOCAL plan_cache_mode = {}; PREPARE jq_plan_probe ({}) AS {}",
        mode.setting(), path.types, path.sql()))
        .unwrap_or_else(|e| panic!("{}: PREPARE failed: {e}\n{}", path.label, path.sql()));
    let plan: Value = tx
        .query_one(&format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE jq_plan_probe({args})"),
                   &[])
        .unwrap_or_else(|e| panic!("{}: EXPLAIN failed: {e}", path.label))
        .get(0);
    tx.batch_execute("DEALLOCATE jq_plan_probe").expect("DEALLOCATE");
    tx.rollback().expect("ROLLBACK");
    Explained {
        label: format!("{} [{:?} plan; {}]\n  SQL: {}", path.label, mode, args, norm(&path.sql())),
        root: plan[0]["Plan"].clone(),
    }
}
