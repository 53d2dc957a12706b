//! Flow control's selections (docs/flow-control.md) read their own partial indexes; the claim keeps its plan.

use jq_pg_test::TestDb;

use super::data::build_base;
use super::plan_tree::{check_ordered_pick, Failures};
use super::statements::{explain, CLAIM_PICK, CLAIM_PICK_ONE, HotPath, Mode};

const KEY_FILL_PICK: HotPath = HotPath {
    label: "jq._key_fill: the key's next blocked jobs",
    function: "jq._key_fill(text,text,integer)",
    source: "SELECT b.id FROM ONLY jq.jobs b
             WHERE b.queue = _key_fill.queue AND b.concurrency_key = _key_fill.concurrency_key
               AND b.state = 'blocked'
             ORDER BY b.run_at, b.id
             LIMIT v_k - v_used
             FOR UPDATE",
    subst: &[("_key_fill.queue", "$1"), ("_key_fill.concurrency_key", "$2"), ("v_k - v_used", "$3")],
    types: "text, text, integer",
};

const AGE_PICK: HotPath = HotPath {
    label: "jq._age: ready jobs due for an aging step",
    function: "jq._age(timestamptz,integer)",
    source: "SELECT x.id FROM ONLY jq.jobs x
             WHERE x.state = 'ready' AND x.next_age_at <= _age.now
             ORDER BY x.next_age_at
             LIMIT _age.batch
             FOR UPDATE SKIP LOCKED",
    subst: &[("_age.now", "$1"), ("_age.batch", "$2")],
    types: "timestamptz, integer",
};

/// Flow control's selections read their own partial indexes in order, one batch: the fill of a
/// key reads that key's blocked jobs from jobs_blocked_idx (2,000 keys with 10 blocked jobs
/// each around it), aging reads jobs_aging_idx (which holds only jobs of aging queues). The
/// claim itself is unchanged for keyed, aging and plain queues alike (checked above with the
/// base data set, which has none of them, and with the key and aging data here).
#[test]
fn flow_control_selections_use_their_partial_indexes_and_the_claim_keeps_its_plan() {
    let db = TestDb::new("plans_flow");
    let mut c = build_base(&db);
    for path in [&KEY_FILL_PICK, &AGE_PICK, &CLAIM_PICK, &CLAIM_PICK_ONE] {
        path.check_source(&mut c);
    }
    c.batch_execute(
        "SELECT jq.create_queue('flow.k'); SELECT jq.create_queue('flow.a');
         SELECT jq.alter_queue('flow.a', priority_aging => '1 minute');
         SELECT count(jq.enqueue('flow.k', '{}', concurrency_key => 'k' || (g % 2000)))
         FROM generate_series(1, 22000) g;
         SELECT count(jq.enqueue('flow.a', '{}', run_at => now() - (g || ' seconds')::interval))
         FROM generate_series(1, 3000) g;
         ANALYZE jq.jobs;",
    )
    .unwrap();
    let mut f = Failures::default();
    for mode in [Mode::Custom, Mode::Generic] {
        for limit in [1i64, 5] {
            let e = explain(&mut c, &KEY_FILL_PICK, &format!("'flow.k', 'k7', {limit}"), mode);
            f.check(check_ordered_pick(&e, "jobs_blocked_idx", Some(limit)));
        }
        for (at, batch) in [("now()", 5000i64), ("now() + interval '1 hour'", 5000), ("now() + interval '1 hour'", 100)] {
            let e = explain(&mut c, &AGE_PICK, &format!("{at}, {batch}"), mode);
            f.check(check_ordered_pick(&e, "jobs_aging_idx", Some(batch)));
        }
        for queue in ["flow.k", "flow.a"] {
            let e = explain(&mut c, &CLAIM_PICK, &format!("'{queue}', 10"), mode);
            f.check(check_ordered_pick(&e, "jobs_claim_idx", Some(10)));
        }
    }
    f.finish();
}
