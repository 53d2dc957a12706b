//! docs/kinds.md's example deployment, run as written: its SQL blocks create the queues, the
//! kinds and their hooks; every kind's jobs are then failed until dead and the domain state its
//! hook writes is checked, with the policy table as jq.kind_policies shows it.

use jq_pg_test::{claim, Client, TestDb};

use super::{fail, one};

/// The ```sql blocks of the section "## Example deployment" of docs/kinds.md, in order.
fn example_sql() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/kinds.md");
    let doc = std::fs::read_to_string(path).expect("docs/kinds.md");
    let section = &doc[doc.find("## Example deployment").expect("the example's heading")..];
    section.split("```sql\n").skip(1).map(|b| b[..b.find("```").expect("end of block")].to_string()).collect()
}

/// Fails job id until it is dead, promoting each retry at its own run_at; returns the attempts.
fn fail_until_dead(c: &mut Client, queue: &str, id: i64) -> i32 {
    for n in 1.. {
        let j = claim(c, queue, "w", 1, None).pop().unwrap_or_else(|| panic!("{queue}: nothing to claim"));
        assert_eq!(j.id, id);
        match fail(c, &j, &format!("{queue} failure {n}")).as_deref() {
            Some("dead") => return n,
            Some("scheduled") => c.batch_execute(&format!("SELECT jq._promote(run_at) FROM jq.jobs WHERE id = {id}")).unwrap(),
            other => assert_eq!(other, Some("ready")),
        }
    }
    unreachable!()
}

#[test]
fn the_example_deployments_policy_table_runs_as_documented() {
    let db = TestDb::new("kinds_example");
    let mut c = db.connect();
    let blocks = example_sql();
    assert_eq!(blocks.len(), 2, "docs/kinds.md: the example's two SQL blocks");
    c.batch_execute(&blocks[0]).expect("the example's setup");
    let policies: Vec<String> = c
        .query("SELECT format('%s %s %s %s %s %s %s', queue, kind, max_attempts, backoff_base, backoff_max,
                              timeout, on_dead) FROM jq.kind_policies ORDER BY queue, kind", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(policies, [
        "ai ai.invoke 2 00:00:05 00:00:20 00:00:45 app.ai_invoke_dead(jq.jobs)",
        "ingest malware_scan 5 00:00:10 00:05:00 00:02:00 app.malware_scan_dead(jq.jobs)",
        "mail mail.poll 5 00:00:30 00:15:00 00:05:00 app.mail_poll_dead(jq.jobs)",
        "maintenance audit_export 5 01:00:00 01:00:00 00:30:00 app.audit_export_dead(jq.jobs)",
        "maintenance retention_purge 3 01:00:00 01:00:00 00:30:00 app.retention_purge_dead(jq.jobs)",
        "parse document_parse 3 00:01:00 00:10:00 00:01:30 app.document_parse_dead(jq.jobs)",
        "score batch_rescore 3 00:00:01 01:00:00 00:01:00 app.batch_rescore_dead(jq.jobs)",
        "score score 3 00:00:30 00:05:00 00:01:00 app.score_dead(jq.jobs)",
    ]);
    // The malware scan of the page: five failures, then the attachment is blocked.
    c.batch_execute(&blocks[1]).expect("the example's malware scan");
    let scan: i64 = one(&mut c, "SELECT max(id) FROM jq.jobs");
    assert_eq!(fail_until_dead(&mut c, "ingest", scan), 5);
    assert_eq!(one::<String>(&mut c, "SELECT virus_scan_status || ' ' || parse_blocked FROM app.attachments WHERE id = 7"),
               "scan_failed true");
    // Every other kind, with the domain row its hook writes.
    c.batch_execute(
        "INSERT INTO app.channels VALUES ('inbox');
         INSERT INTO app.parse_attempts VALUES (7, 1, 'running', NULL);
         INSERT INTO app.applications VALUES (11);
         INSERT INTO app.retention_runs VALUES (3, 'running', NULL);",
    )
    .unwrap();
    for (queue, kind, payload, attempts) in [
        ("mail", "mail.poll", r#"{"channel": "inbox"}"#, 5),
        ("parse", "document_parse", r#"{"attachment_id": 7, "parse_attempt_no": 1}"#, 3),
        ("score", "score", r#"{"application_id": 11}"#, 3),
        ("score", "batch_rescore", r#"{"batch_id": 2, "application_id": 11}"#, 3),
        ("ai", "ai.invoke", "{}", 2),
        ("maintenance", "retention_purge", r#"{"run_id": 3}"#, 3),
        ("maintenance", "audit_export", "{}", 5),
    ] {
        let id: i64 = c
            .query_one("SELECT jq.enqueue($1, $2::text::jsonb, kind => $3)", &[&queue, &payload, &kind])
            .unwrap()
            .get(0);
        assert_eq!(fail_until_dead(&mut c, queue, id), attempts, "{kind}");
    }
    assert_eq!(one::<String>(&mut c, "SELECT state FROM app.channels WHERE name = 'inbox'"), "degraded");
    assert_eq!(one::<String>(&mut c, "SELECT state || ': ' || reason FROM app.parse_attempts"), "failed: parse failure 3");
    assert!(one::<bool>(&mut c, "SELECT scoring_failed FROM app.applications WHERE id = 11"));
    assert_eq!(one::<String>(&mut c, "SELECT reason FROM app.rescore_failures"), "score failure 3");
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM app.breakers WHERE open_since IS NOT NULL"), 1);
    assert_eq!(one::<String>(&mut c, "SELECT state FROM app.retention_runs"), "halted");
    assert_eq!(one::<String>(&mut c, "SELECT string_agg(source, ', ' ORDER BY at, source) FROM app.alerts"),
               "mail, retention, audit export");
    assert_eq!(one::<i64>(&mut c, "SELECT count(*) FROM jq.pending_hooks"), 0, "a hook of the example failed");
}
