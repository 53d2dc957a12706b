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
