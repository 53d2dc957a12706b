//! Upgrades: `ALTER EXTENSION jq UPDATE` from the oldest frozen release (sql/releases, installed
//! next to the current version by pg_test/run) must give the same extension as a fresh
//! `CREATE EXTENSION jq`, and must keep a populated database's rows and the leases workers hold.
//! See docs/upgrades.md.

use jq_pg_test::fingerprint;
use jq_pg_test::{upgraded_install, TestDb, OLDEST_RELEASE};

/// A fresh install and an install of the oldest release upgraded to the current version have
/// the same catalog fingerprint (pg_test/src/fingerprint.rs: every member's definition, ACLs,
/// comments, constraints, indexes, enum labels, extconfig, pg_init_privs, the schema's ACL).
///
/// Seen failing (negative control, by hand): with a deliberately broken upgrade script installed
/// in place of the real one (a changed body of jq.max_payload_bytes, `REVOKE EXECUTE ON FUNCTION
/// jq.cancel(bigint) FROM PUBLIC`, `ALTER TABLE jq.schedules ADD COLUMN note text`) it reported
/// five differences: the function definition as a line diff, jq.cancel's ACL, its pg_init_privs
/// row, the extra column, and jq.schedules' column order (counted: jq.schedule returns the row).
/// JQ_TEST_BREAK=upgrade_misses_function reproduces the first kind without replacing files.
#[test]
fn fresh_install_equals_upgraded_install() {
    let fresh = TestDb::new("upg_fresh");
    let upgraded = TestDb::with_setup("upg_upgraded", &upgraded_install());
    let mut b = upgraded.connect();
    if jq_pg_test::broken("upgrade_misses_function") {
        // What an upgrade script that forgot one function's new body leaves behind.
        b.batch_execute(
            "CREATE OR REPLACE FUNCTION jq.max_error_length() RETURNS integer
             LANGUAGE sql IMMUTABLE AS $$ SELECT 1 $$",
        )
        .unwrap();
    }
    let version: String = b
        .query_one("SELECT extversion FROM pg_extension WHERE extname = 'jq'", &[])
        .unwrap()
        .get(0);
    assert_ne!(version, OLDEST_RELEASE, "ALTER EXTENSION jq UPDATE did not upgrade");
    let fa = fingerprint::catalog(&mut fresh.connect());
    let fb = fingerprint::catalog(&mut b);
    if std::env::var_os("JQ_TEST_SHOW_FINGERPRINT").is_some() {
        for (k, v) in &fa {
            eprintln!("{k} = {v}");
        }
    }
    let (text, counted) = fingerprint::diff("fresh", &fa, "upgraded", &fb);
    if !text.is_empty() {
        eprintln!("fresh install vs {OLDEST_RELEASE} upgraded to {version}:\n{text}");
    }
    assert_eq!(counted, 0, "the upgraded install differs from a fresh one in {counted} places:\n{text}");
    assert!(fa.len() > 300, "implausibly small fingerprint: {} lines", fa.len());
}
