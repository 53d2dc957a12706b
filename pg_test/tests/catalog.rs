//! The catalog as users see it: every jq object is documented with COMMENT ON.

use jq_pg_test::TestDb;

#[test]
fn every_function_table_view_and_type_in_schema_jq_has_a_comment() {
    let db = TestDb::new("catalog");
    let mut c = db.connect();
    let missing: Vec<String> = c
        .query(
            "SELECT 'function ' || p.oid::regprocedure::text
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'jq' AND obj_description(p.oid, 'pg_proc') IS NULL
             UNION ALL
             SELECT 'relation ' || c.oid::regclass::text
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'jq' AND c.relkind IN ('r', 'v')
                AND obj_description(c.oid, 'pg_class') IS NULL
             UNION ALL
             SELECT 'type ' || t.oid::regtype::text
               FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
              WHERE n.nspname = 'jq' AND (t.typtype = 'e'
                    OR (t.typtype = 'c' AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c'))
                AND obj_description(t.oid, 'pg_type') IS NULL
             UNION ALL
             SELECT 'schema jq' WHERE obj_description('jq'::regnamespace, 'pg_namespace') IS NULL",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(missing.is_empty(), "objects without COMMENT ON: {missing:#?}");
}

const CLAIM: &str = "jq.claim(text,text,integer,interval,interval,bigint)";
const CLAIM_BATCH: &str = "jq._claim_batch(text,text,integer,interval,boolean,bigint,boolean)";

/// The claim statement exists in four copies kept side by side (sql/claim.sql's head): the
/// hinted and the full one-job copies in jq.claim, the hinted and the full batch copies in
/// jq._claim_batch. Each copy must match its own partial-index predicate, so they cannot be one
/// statement; what they write (SET) and return (RETURNING, and the batch copies' outer SELECT)
/// must be the same. Read from the installed functions (pg_proc.prosrc), with the parameter
/// qualifiers (claim., _claim_batch.) and whitespace taken out; the one-job copies return
/// created_at through jq._note_claimed_created_at, the batch copies select it after
/// jq._note_claimed.
/// Negative control `JQ_TEST_BREAK=claim_copy_drift` (the batch copies' lease_expires_at
/// computed from now() instead of clock_timestamp()): seen failing, naming the SET lists.
#[test]
fn the_four_claim_statements_set_and_return_the_same_columns() {
    let db = TestDb::new("claim_copies");
    let mut c = db.connect();
    if jq_pg_test::broken("claim_copy_drift") {
        jq_pg_test::sabotage(
            &mut c,
            CLAIM_BATCH,
            "lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)",
            "lease_expires_at = pg_catalog.now() OPERATOR(pg_catalog.+)",
            2,
        );
    }
    let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let body = |c: &mut jq_pg_test::Client, f: &str| -> String {
        let src: String = c
            .query_one("SELECT prosrc FROM pg_catalog.pg_proc WHERE oid = $1::text::regprocedure", &[&f])
            .unwrap()
            .get(0);
        norm(&src).replace("_claim_batch.", "").replace("claim.", "")
    };
    const NOTE_ONE: &str = "jq._note_claimed_created_at(j.queue, j.priority, j.run_at, j.id, j.created_at)";
    const NOTE_BATCH: &str = "WHERE jq._note_claimed(c.queue, c.priority, c.run_at, c.id)";
    // (function, SET list, RETURNING list) of every copy.
    let mut copies: Vec<(&str, String, String)> = Vec::new();
    for f in [CLAIM, CLAIM_BATCH] {
        let b = body(&mut c, f);
        for (i, _) in b.match_indices("UPDATE ONLY jq.jobs j SET ") {
            let rest = &b[i + "UPDATE ONLY jq.jobs j SET ".len()..];
            let set = rest[..rest.find(" FROM jq.queues q ").expect("FROM after SET")].to_string();
            let ret = &rest[rest.find(" RETURNING ").expect("RETURNING") + " RETURNING ".len()..];
            let returning = if f == CLAIM {
                let end = ret.find(';').expect("; after RETURNING");
                // In created_at's place: the note runs once per row updated, returning created_at.
                assert!(ret[..end].contains(&format!("{NOTE_ONE}, ")) || ret[..end].ends_with(NOTE_ONE),
                        "{f}: a one-job copy's RETURNING does not return created_at through {NOTE_ONE}: {}", &ret[..end]);
                ret[..end].replace(NOTE_ONE, "j.created_at")
            } else {
                let end = ret.find(" ) SELECT ").expect("outer SELECT after RETURNING");
                let outer = &ret[end + " ) SELECT ".len()..];
                let from = outer.find(" FROM claimed c ").expect("FROM claimed c");
                assert!(outer[from..].starts_with(&format!(" FROM claimed c {NOTE_BATCH}")),
                        "{f}: a batch copy does not filter its claimed rows by {NOTE_BATCH}: {outer}");
                assert_eq!(outer[..from].replace("c.", "j."), ret[..end],
                           "{f}: a batch copy's outer SELECT differs from its RETURNING");
                ret[..end].to_string()
            };
            copies.push((f, set, returning));
        }
    }
    assert_eq!(copies.iter().filter(|(f, ..)| *f == CLAIM).count(), 2, "jq.claim: not two one-job copies");
    assert_eq!(copies.iter().filter(|(f, ..)| *f == CLAIM_BATCH).count(), 2, "jq._claim_batch: not two batch copies");
    // What jq.claimed_job holds, in order, is what every copy returns.
    let columns: String = c
        .query_one("SELECT string_agg('j.' || attname, ', ' ORDER BY attnum) FROM pg_catalog.pg_attribute
                    WHERE attrelid = (SELECT typrelid FROM pg_catalog.pg_type WHERE oid = 'jq.claimed_job'::regtype)
                      AND attnum > 0 AND NOT attisdropped", &[])
        .unwrap()
        .get(0);
    let (_, set0, ret0) = &copies[0];
    let mut drift = Vec::new();
    for (f, set, ret) in &copies {
        if set != set0 {
            drift.push(format!("SET lists differ:\n  {CLAIM}: {set0}\n  {f}: {set}"));
        }
        if ret != ret0 || *ret != columns {
            drift.push(format!("RETURNING lists differ:\n  jq.claimed_job: {columns}\n  {CLAIM}: {ret0}\n  {f}: {ret}"));
        }
    }
    assert!(drift.is_empty(), "the claim statement's copies drifted apart (sql/claim.sql):\n{}", drift.join("\n"));
}
